-- POST a payment method with a fresh Luhn-valid number each request: every create is a
-- durable write.
local counter = 0
local function luhn(prefix)
  local sum, double = 0, true
  for i = #prefix, 1, -1 do
    local d = tonumber(prefix:sub(i, i))
    if double then d = d * 2; if d > 9 then d = d - 9 end end
    sum = sum + d; double = not double
  end
  return prefix .. tostring((10 - sum % 10) % 10)
end
request = function()
  counter = counter + 1
  local base = string.format("4%014d", (math.random(1, 99999999) * 100000 + counter) % 100000000000000)
  local body = '{"entityId":"bench","card":{"number":"' .. luhn(base) .. '","expirationMonth":"12","expirationYear":"2034","cvc":"123"}}'
  return wrk.format("POST", "/projects/bench/payment-methods",
    {["Authorization"] = "Bearer " .. os.getenv("TOKEN"), ["Content-Type"] = "application/json"}, body)
end
