-- POST the body in $BODY_FILE with the headers the proxy needs; identical for paycred and
-- the baselines (which forward it untouched). $CONTENT_TYPE, if set, replaces JSON's; $ANSWER
-- (`64k`) asks the upstream for a larger answer; $CLOSE_TARGET asks it to close the connection
-- after its answer.
local f = assert(io.open(os.getenv("BODY_FILE"), "rb"))
local body = f:read("*a")
f:close()
wrk.method = "POST"
wrk.body = body
wrk.headers["Content-Type"] = os.getenv("CONTENT_TYPE") or "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("TOKEN")
wrk.headers["Svc-Target-URL"] = os.getenv("TARGET_URL")
if os.getenv("ANSWER") then
  wrk.headers["X-Answer"] = os.getenv("ANSWER")
end
if os.getenv("CLOSE_TARGET") then
  wrk.headers["X-Close"] = "1"
end
