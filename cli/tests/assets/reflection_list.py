"""Lists a gRPC server's services through server reflection, the way a
generic tool does, and resolves each one's descriptor (its methods) from
the files the server sends. Usage: reflection_list.py HOST:PORT

Prints one line per service: NAME METHOD,METHOD,...
Exits non-zero if reflection is not served (UNIMPLEMENTED) or a service's
descriptor cannot be resolved.
"""

import sys

import grpc
from google.protobuf.descriptor_pool import DescriptorPool
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)


def main() -> int:
    channel = grpc.insecure_channel(sys.argv[1])
    grpc.channel_ready_future(channel).result(timeout=10)
    database = ProtoReflectionDescriptorDatabase(channel)
    pool = DescriptorPool(database)
    for name in sorted(database.get_services()):
        if name.startswith("grpc.reflection."):
            continue
        service = pool.FindServiceByName(name)
        methods = ",".join(method.name for method in service.methods)
        print(f"{name} {methods}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
