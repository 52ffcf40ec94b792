-- wrk script: each request carries the next pre-signed PAYMENT-SIGNATURE from $PAYMENTS (one per line).
-- Every payment is used once; when a thread runs out it wraps around (those requests then get 402 and are
-- counted separately by the summary below as non-2xx).
local path = os.getenv("ARTICLE_PATH") or "/x402Article?articleId=c2pa-explained"
local file = os.getenv("PAYMENTS") or "payments.txt"
local counter = 0
local threads = {}

function setup(thread)
  counter = counter + 1
  thread:set("id", counter)
  table.insert(threads, thread)
end

function init(args)
  payments = {}
  local n = 0
  local nthreads = tonumber(os.getenv("WRK_THREADS") or "1")
  for line in io.lines(file) do
    n = n + 1
    -- split the file between threads so no payment is sent twice
    if (n % nthreads) == (id - 1) then
      table.insert(payments, line)
    end
  end
  i = 0
end

function request()
  i = i + 1
  local p = payments[((i - 1) % #payments) + 1]
  return wrk.format("GET", path, { ["PAYMENT-SIGNATURE"] = p })
end

function done(summary, latency, requests)
  io.write(string.format("non-2xx or socket errors: %d\n", summary.errors.status + summary.errors.connect
    + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
