from gateway.admin.controllers import AdminController
from gateway.admin.models import ModelController

__all__ = ["AdminController", "ModelController"]
