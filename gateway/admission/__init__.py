"""The admission loop over persisted workloads, and the lock that keeps it single."""

from gateway.admission.leader import LeaderLock
from gateway.admission.loop import AdmissionLoop, PassResult, StaleDecisionError

__all__ = ["AdmissionLoop", "LeaderLock", "PassResult", "StaleDecisionError"]
