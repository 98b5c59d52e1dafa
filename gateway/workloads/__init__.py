from gateway.workloads.controllers import WorkloadController

__all__ = ["WorkloadController"]
