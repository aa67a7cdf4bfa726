"""Every message that crosses a process boundary between the leader and a worker, declared
once: one module per family, with its paths, bodies, replies and limits.

    common       the JSON object type, status codes, the call token's header, ErrorReply,
                 the transport-neutral Answer/Outcome/Fence, SentCheckpoint, field readers
    host         POST /v1/partitions/{p}/host      HostRequest -> HostReply
    release      POST /v1/partitions/{p}/release   ReleaseRequest -> ReleaseReply
    checkpoint   POST /v1/checkpoint               CheckpointRequest -> 202 CheckpointReply
    warm         POST /v1/partitions/{p}/warm      WarmRequest -> WarmReply
    rescale      POST /v1/partitions/{p}/cut, POST /v1/rescale/build
                                                   CutRequest -> CutReply,
                                                   BuildRequest -> BuildReply
    session      worker -> coordinator: registration, heartbeat, restart notice, checkpoint
                 reports (the coordinator's HTTP API; its OpenAPI document is built from them)

The leader builds requests and reads replies through these types
(`coordinator/service/call_results.py`, `coordinator/core/effects.py`), a worker answers
with them (`pipeline/http_api.py`), and so do the simulation and the scripted test worker,
so no side can drift from the others. Every call carries `Authorization: Bearer <call
token>`; a worker compares it in constant time. A failed call answers ErrorReply {error,
message, field?}: 400 a bad body (the field named), 401 not the call token, 409 the worker
does not hold that epoch, 503 a checkpoint could not be loaded or written (retried).

The library, measured (`python -m bench messages`, bench/results/messages.json): the
leader <-> worker calls are frozen dataclasses validated by hand, the worker ->
coordinator messages pydantic models. Decoding a host call costs microseconds with any
candidate, and a call waits on checkpoint I/O, so no speed argues for a change there; the
hand-written readers name the failing field exactly and keep the worker's side free of
any dependency. The worker -> coordinator messages are part of the coordinator's HTTP API,
whose validation and OpenAPI document are pydantic's: declaring them in a second library
would split that API. A heartbeat decodes as fast with pydantic as by hand; msgspec decodes
it about five times faster, which would matter only at thousands of heartbeats a second on
one leader, and is not a dependency.
"""
