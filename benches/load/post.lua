-- POST the body in $BODY_FILE with the headers the proxy needs; identical for paycred and
-- the baselines (which forward it untouched).
local f = assert(io.open(os.getenv("BODY_FILE"), "rb"))
local body = f:read("*a")
f:close()
wrk.method = "POST"
wrk.body = body
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("TOKEN")
wrk.headers["Svc-Target-URL"] = os.getenv("TARGET_URL")
