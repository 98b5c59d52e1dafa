from gateway.health.controllers import HealthController

__all__ = ["HealthController"]
