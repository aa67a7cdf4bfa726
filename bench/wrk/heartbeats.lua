-- wrk script: worker heartbeats, round-robin over registered workers, each with its own
-- token. Its argument is a file of "worker_id incarnation token" lines (bench.load writes
-- it).
local workers = {}
local n = 0
local i = 0

function init(args)
  for line in io.lines(args[1]) do
    local wid, inc, tok = line:match("^(%S+) (%S+) (%S+)$")
    if wid then
      n = n + 1
      workers[n] = {
        "/v1/workers/" .. wid .. "/heartbeat",
        { ["Authorization"] = "Bearer " .. tok, ["Content-Type"] = "application/json" },
        '{"incarnation":' .. inc .. ',"load":1.0,"partitions":{}}',
      }
    end
  end
  if n == 0 then
    error("no workers in " .. args[1])
  end
end

function request()
  i = i % n + 1
  local w = workers[i]
  return wrk.format("POST", w[1], w[2], w[3])
end

-- report.lua beside this script (wrk is given its absolute path) defines `done`.
dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "report.lua")
