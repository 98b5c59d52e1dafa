from gateway.admin.controllers import AdminController

__all__ = ["AdminController"]
