"""P4Runtime 1.4 service of the embedded target.

Small modules with one job each: ``status`` (error codes and ``google.rpc.Status``
details), ``bytestrings`` (P4Runtime binary strings), ``p4info_index`` (P4Info look-ups),
``entries`` (validated translation between protobuf entities and the runtime state),
``arbitration`` (primary election per device and role), ``pipeline_config`` (saved and
committed forwarding-pipeline configs), ``service`` (the gRPC servicer) and ``server``
(the thread-pool gRPC server bound to loopback by default).
"""
