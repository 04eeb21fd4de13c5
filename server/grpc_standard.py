"""The standard gRPC services served beside medha.v1.Medha, for grpcurl, load balancers and Kubernetes.

  grpc.health.v1.Health    Check / Watch for "" (the whole server) and "medha.v1.Medha":
                           SERVING while the engine admits requests; NOT_SERVING once it drains,
                           stops or fails (Check reads the engine's state on every call; Watch
                           streams the status ServingApp sets: SERVING at start, NOT_SERVING at drain)
  grpc.reflection.v1alpha  ServerReflection: lists the services and serves their descriptors, so
                           `grpcurl host:port list` / `describe` work without the .proto file

Both health methods are open without the bearer token (server.auth); reflection is not.
"""

from __future__ import annotations

from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from server.grpc_service import SERVICE_NAME

HEALTH_SERVICE = health.SERVICE_NAME
HEALTH_METHODS = tuple(f"/{HEALTH_SERVICE}/{m}" for m in ("Check", "Watch"))
CHECKED = (health.OVERALL_HEALTH, SERVICE_NAME)
"""The names a health check may ask about."""


class EngineHealth(health.aio.HealthServicer):
    """grpc.health.v1 over an AsyncEngine (which several apps may share, and which may fail)."""

    def __init__(self, async_engine):
        super().__init__()
        self.ae = async_engine

    async def start(self) -> None:
        for name in CHECKED:
            await self.set(name, health_pb2.HealthCheckResponse.SERVING)

    async def Check(self, request, context):
        response = await super().Check(request, context)  # NOT_FOUND for a name not in CHECKED
        if not self.ae.accepting:
            response.status = health_pb2.HealthCheckResponse.NOT_SERVING
        return response


async def add_standard_services(server, async_engine) -> EngineHealth:
    """Health and reflection on a grpc.aio server (before it starts); returns the health servicer."""
    servicer = EngineHealth(async_engine)
    await servicer.start()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    reflection.enable_server_reflection((SERVICE_NAME, HEALTH_SERVICE, reflection.SERVICE_NAME), server)
    return servicer
