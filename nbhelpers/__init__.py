"""nbhelpers: the logic behind the fine-tuning optimization workbook.

Notebooks narrate and call into this package; every measurement, analysis and plot lives here.
"""

from nbhelpers.measure.config import ConfigError, RunConfig
from nbhelpers.measure.store import RunRecord, RunStore

__all__ = ["ConfigError", "RunConfig", "RunRecord", "RunStore"]
__version__ = "0.1.0"
