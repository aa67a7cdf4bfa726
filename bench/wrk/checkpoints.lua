-- wrk script: checkpoint acks (POST /v1/checkpoints), round-robin over registered workers,
-- each with its own token, each ack reporting every partition the worker owns, as the
-- pipeline's workers do, at an offset one past its previous ack's. Its arguments: a file of
-- "worker_id incarnation token partition:epoch ..." lines (bench.checkpoints writes it), the
-- cluster's store base URI (`checkpoint_ref.store_base`) and the first offset (a run after
-- another starts past it: an offset behind the recorded one is fenced).
local workers = {}
local n = 0
local i = 0
local base = ""

function init(args)
  base = args[2]
  local first = tonumber(args[3])
  for line in io.lines(args[1]) do
    local wid, inc, tok, owned = line:match("^(%S+) (%S+) (%S+) (.+)$")
    if wid then
      local parts = {}
      for p, e in owned:gmatch("(%d+):(%d+)") do
        parts[#parts + 1] = { tonumber(p), tonumber(e) }
      end
      n = n + 1
      workers[n] = {
        prefix = '{"worker_id":"' .. wid .. '","incarnation":' .. inc .. ',"checkpoints":[',
        headers = { ["Authorization"] = "Bearer " .. tok, ["Content-Type"] = "application/json" },
        parts = parts,
        offset = first,
      }
    end
  end
  if n == 0 then
    error("no workers in " .. args[1])
  end
end

-- The same name the pipeline writes (`checkpoint_ref.checkpoint_key`).
local ENTRY = '{"partition":%d,"epoch":%d,"offset":%d,'
  .. '"uri":"%scheckpoints/p%05d/e%010d-o%020d.ckpt"}'

function request()
  i = i % n + 1
  local w = workers[i]
  w.offset = w.offset + 1
  local entries = {}
  for k, pe in ipairs(w.parts) do
    entries[k] = string.format(ENTRY, pe[1], pe[2], w.offset, base, pe[1], pe[2], w.offset)
  end
  return wrk.format("POST", "/v1/checkpoints", w.headers, w.prefix .. table.concat(entries, ",") .. "]}")
end

-- report.lua beside this script (wrk is given its absolute path) defines `done`.
dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "report.lua")
