"""Every message that crosses a process boundary between the leader and a worker, declared
once: one module per family, with its paths, bodies, replies and limits.

    common       the JSON object type, status codes, the call token's header, ErrorReply,
                 the transport-neutral Answer/Outcome/Fence, SentCheckpoint, field readers
    host         POST /v1/partitions/{p}/host      HostRequest -> HostReply
    release      POST /v1/partitions/{p}/release   ReleaseRequest -> ReleaseReply
    checkpoint   POST /v1/checkpoint               CheckpointRequest -> 202 CheckpointReply
    warm         POST /v1/partitions/{p}/warm      WarmRequest -> WarmReply
                 POST /v1/partitions/{p}/unwarm    UnwarmRequest -> UnwarmReply
    rescale      POST /v1/partitions/{p}/cut, POST /v1/rescale/build
                                                   CutRequest -> CutReply,
                                                   BuildRequest -> BuildReply
    pipeline_rescale  POST /v1/rescale/build/pipeline  PipelineBuildRequest -> BuildReply
                 (a recorded pipeline's build; its cuts are CutRequest by number)
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
worker -> coordinator messages are pydantic models, the leader <-> worker calls frozen
dataclasses with hand-written readers. The session's messages belong to the coordinator's
HTTP API, whose validation and OpenAPI document are pydantic's, and pydantic-core decodes a
heartbeat faster than hand-written checks; msgspec decodes it about five times faster again,
some 0.1 ms of the leader's CPU per heartbeat, which does not pay for a new dependency and a
second schema library splitting the API's declarations. A
call decodes in microseconds with any of the three against the milliseconds of checkpoint
I/O behind it, and the calls' rules (routing bounds per generation, a build's cuts naming
each old partition once, lenient reply readers) read plainest as code (docs/architecture.md,
"Messages between processes").
"""
