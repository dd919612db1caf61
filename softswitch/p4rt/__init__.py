"""P4Runtime 1.4 service of the embedded target.

Small modules with one job each: ``status`` (error codes and ``google.rpc.Status``
details), ``bytestrings`` (P4Runtime binary strings), ``p4info_index`` (P4Info look-ups),
``entries`` (validated translation of keys and actions), ``wire`` and ``encode`` (fast
protobuf wire paths for table entries), ``writes`` and ``reads`` (one update, one read
request), ``transfer`` (copying state between pipelines), ``arbitration`` (primary
election per device and role), ``pipeline_config`` (saved and committed configs),
``service`` (the gRPC servicer) and ``server`` (the thread-pool gRPC server, loopback by
default). ``softswitch.p4runtime_server`` is the public entry point.
"""
