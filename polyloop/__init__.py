"""PolyLoop: agent runs that resume step by step after a crash.

Before every model call and every tool action an intent record is made
durable in an append-only log; on resume every execution is classified as
done, not started, unknown or impossible, `safe` tools are replayed, `never`
tools stop for an operator, and a log that cannot be explained is refused.
PolyLoop promises detection, not atomicity: it never silently loses or
silently repeats a side effect, but it cannot make a side effect and its log
record one indivisible act.
"""

from ._run.agent import Agent, default_directory
from ._run.result import RunResult
from ._run.artifacts import ArtifactCheck, ArtifactRef, Artifacts
from ._fleet.batch import BatchInterrupted, run_batch
from ._fleet.plan import BatchError
from ._fleet.report import BatchProgress, BatchReport, BatchRun
from ._operate.archive import archive
from ._operate.archive_report import ArchivedRun, ArchiveReport
from ._operate.cancel import CancelOutcome, cancel
from ._operate.decide import answer, approve, deny
from ._recovery.on_decisions import RequestView
from ._recovery.walker import Execution, Recovery, StepView, check, classify
from ._log.errors import (
    AlertError,
    ApprovalRequiredError,
    ArtifactError,
    CheckpointError,
    CorruptLogError,
    DecisionError,
    CrashLoopError,
    InvalidInputError,
    InvalidRunIdError,
    ModelCallError,
    NeedsOperatorError,
    PolyLoopError,
    Problem,
    ResolutionError,
    RunActiveError,
    RunExistsError,
    RunMismatchError,
    RunNotFoundError,
    SchemaVersionError,
    StoreError,
    StoreUrlError,
    TargetError,
    TransientModelError,
)
from ._log.divergence import DivergenceError
from ._log.unavailable import ModelRefusedError, ModelUnavailableError
from ._run.retry import ModelOutage, outages as model_outages
from ._log.ids import check_run_id, new_run_id
from ._operate.inspect import RunReport, inspect_run
from ._operate.resolve import mark_resolved
from ._operate.ls import RunSummary, list_runs
from ._operate.watch import WatchEvent, watch_run
from ._operate.doctor import DoctorCheck, doctor
from ._log.model_port import Message, Model, ModelOutput, ScriptedModel, ToolCall, Usage
from ._log.records import (
    SCHEMA_VERSION,
    ActionResult,
    ApprovalRequest,
    Decision,
    CheckpointAccepted,
    CrashLoopAccepted,
    Artifact,
    GuardCheck,
    RecordError,
    Resumed,
    Intent,
    ModelCallResult,
    Record,
    Resolution,
    RunFinished,
    RunStarted,
    RunStopped,
    StepCompleted,
)
from ._log.decode import decode as decode_record
from ._log.records import encode as encode_record
from ._log.store_port import ArtifactStore, LockingStore, Store
from ._run.target import load_target, resume_run, run_target
from ._run.context import ToolContext
from ._run.observe import Reconciled, executed, not_executed, unknown
from ._run.tools import Tool, ToolAnswerLostError, ask_human, tool
from ._operate.verify import FileVerdict, VerifyReport, verify_file, verify_logs
from .stores import JsonlStore

__version__ = "0.1.0"


#: The earlier name of `ArtifactCheck`, kept so existing imports keep working.
ProductCheck = ArtifactCheck

__all__ = [
    "ActionResult",
    "Agent",
    "AlertError",
    "ApprovalRequest",
    "ApprovalRequiredError",
    "ArchiveReport",
    "ArchivedRun",
    "Artifact",
    "ArtifactCheck",
    "ArtifactError",
    "ArtifactRef",
    "ArtifactStore",
    "Artifacts",
    "BatchError",
    "BatchInterrupted",
    "BatchProgress",
    "BatchReport",
    "BatchRun",
    "CancelOutcome",
    "CheckpointAccepted",
    "CheckpointError",
    "CorruptLogError",
    "CrashLoopAccepted",
    "CrashLoopError",
    "Decision",
    "DecisionError",
    "DivergenceError",
    "DoctorCheck",
    "Execution",
    "FileVerdict",
    "GuardCheck",
    "Intent",
    "InvalidInputError",
    "InvalidRunIdError",
    "JsonlStore",
    "LockingStore",
    "Message",
    "Model",
    "ModelCallError",
    "ModelCallResult",
    "ModelOutage",
    "ModelOutput",
    "ModelRefusedError",
    "ModelUnavailableError",
    "NeedsOperatorError",
    "PolyLoopError",
    "Problem",
    "ProductCheck",
    "Reconciled",
    "Record",
    "RecordError",
    "Recovery",
    "RequestView",
    "Resolution",
    "ResolutionError",
    "Resumed",
    "RunActiveError",
    "RunExistsError",
    "RunFinished",
    "RunMismatchError",
    "RunNotFoundError",
    "RunReport",
    "RunResult",
    "RunStarted",
    "RunStopped",
    "RunSummary",
    "SCHEMA_VERSION",
    "SchemaVersionError",
    "ScriptedModel",
    "StepCompleted",
    "StepView",
    "Store",
    "StoreError",
    "StoreUrlError",
    "TargetError",
    "Tool",
    "ToolAnswerLostError",
    "ToolCall",
    "ToolContext",
    "TransientModelError",
    "Usage",
    "VerifyReport",
    "WatchEvent",
    "answer",
    "approve",
    "archive",
    "ask_human",
    "cancel",
    "check",
    "check_run_id",
    "classify",
    "decode_record",
    "default_directory",
    "deny",
    "doctor",
    "encode_record",
    "executed",
    "inspect_run",
    "list_runs",
    "load_target",
    "mark_resolved",
    "model_outages",
    "new_run_id",
    "not_executed",
    "resume_run",
    "run_batch",
    "run_target",
    "tool",
    "unknown",
    "verify_file",
    "verify_logs",
    "watch_run",
]

# Re-exported names report their public home, as httpx does.
for _name in __all__:
    _obj = globals()[_name]
    if getattr(_obj, "__module__", "").startswith(("polyloop._", "polyloop.stores._")):
        try:
            _obj.__module__ = "polyloop"
        except (AttributeError, TypeError):
            pass
del _name, _obj
