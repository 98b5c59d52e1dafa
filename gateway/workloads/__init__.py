from gateway.workloads.controllers import EstimateController, WorkloadController

__all__ = ["EstimateController", "WorkloadController"]
