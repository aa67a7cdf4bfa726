-- wrk script: writes, each a new worker registration (`POST /v1/workers`) with a worker id
-- no other request of the run uses; the raw node's `/write` takes the same body. Its
-- argument is the ids' prefix (one per run, so runs never collide).
local prefix = "w"
local n = 0
local headers = { ["Content-Type"] = "application/json" }

function init(args)
  prefix = args[1] or prefix
end

function request()
  n = n + 1
  local body = '{"worker_id":"' .. prefix .. n .. '","address":"http://127.0.0.1:9"}'
  return wrk.format("POST", nil, headers, body)
end

-- report.lua beside this script (wrk is given its absolute path) defines `done`.
dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "report.lua")
