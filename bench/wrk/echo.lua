-- wrk script: POST a small JSON body (the raw node's /echo); same JSON line as heartbeats.lua.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"incarnation":1,"load":1.0,"partitions":{}}'

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"duration_us":%d,"status_errors":%d,"socket_errors":%d,' ..
    '"p50_us":%d,"p99_us":%d,"max_us":%d}\n',
    summary.requests, summary.duration, e.status, e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(99), latency.max))
end
