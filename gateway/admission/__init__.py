"""The admission loop over persisted workloads, and the lock that keeps it single."""

from gateway.admission.dispatcher import Dispatcher, DispatchResult
from gateway.admission.leader import LeaderLock
from gateway.admission.loop import AdmissionLoop, PassResult, StaleDecisionError
from gateway.admission.runtime import AdmissionRuntime

__all__ = [
    "AdmissionLoop",
    "AdmissionRuntime",
    "DispatchResult",
    "Dispatcher",
    "LeaderLock",
    "PassResult",
    "StaleDecisionError",
]
