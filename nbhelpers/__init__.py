"""nbhelpers: the logic behind the fine-tuning optimization workbook.

Notebooks narrate and call into this package; every measurement, analysis and plot lives here.
"""

from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.store import RunRecord, RunStore
from nbhelpers.validation import ConfigError

__all__ = ["ConfigError", "RunConfig", "RunRecord", "RunStore"]
__version__ = "0.1.0"
