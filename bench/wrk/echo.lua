-- wrk script: POST a small JSON body (the raw node's /echo).
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"incarnation":1,"load":1.0,"partitions":{}}'

-- report.lua beside this script (wrk is given its absolute path) defines `done`.
dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "report.lua")
