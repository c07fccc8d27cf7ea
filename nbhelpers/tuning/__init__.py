"""The tuner: successive halving over kernels x padding x attention within a time budget.

``tune(workload, kernels=..., strategies=..., attentions=..., budget_s=...)`` returns a
:class:`~nbhelpers.tuning.journal.TuneResult` (journal DataFrame, plot, winner record); the winner's
RunConfig is written to ``runs/<RUN_NAME>/tuned.json``. ``nbhelpers tune`` is the same from a shell. The
candidates and what cannot run here come from :mod:`nbhelpers.planning.candidates`.
"""

from nbhelpers.planning.candidates import Candidate, build_space
from nbhelpers.tuning.journal import Decision, TuneResult
from nbhelpers.tuning.tuner import Tuner, load_tuned, tune

__all__ = ["Candidate", "Decision", "TuneResult", "Tuner", "build_space", "load_tuned", "tune"]
