make demo                                  # terminal 1: prints "tollway ready base_url=..."
bin/tollway accounts create acme --credits 25                     # terminal 2: prepaid credits in USD
KEY=$(bin/tollway keys create --account acme --monthly-limit 5)   # the key is printed once
curl -s localhost:8080/v1/models           # the catalog, no key needed: demo-chat is owned_by "tollway-demo"
curl -s localhost:8080/v1/chat/completions -H "authorization: Bearer $KEY" -H 'content-type: application/json' \
  -d '{"model":"demo-chat","messages":[{"role":"user","content":"Hello"}]}'
curl -sN localhost:8080/v1/chat/completions -H "authorization: Bearer $KEY" -H 'content-type: application/json' \
  -d '{"model":"demo-chat","stream":true,"messages":[{"role":"user","content":"Stream this"}]}'   # ... data: [DONE]
# A tool call: the model asks for get_weather(city) ...
curl -s localhost:8080/v1/chat/completions -H "authorization: Bearer $KEY" -H 'content-type: application/json' \
  -d '{"model":"demo-chat","messages":[{"role":"user","content":"Weather in Paris?"}],
       "tools":[{"type":"function","function":{"name":"get_weather",
         "parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]}'
# ... and answers once the tool's result comes back.
curl -s localhost:8080/v1/chat/completions -H "authorization: Bearer $KEY" -H 'content-type: application/json' \
  -d '{"model":"demo-chat","messages":[{"role":"user","content":"Weather in Paris?"},
       {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",
         "function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
       {"role":"tool","tool_call_id":"call_1","content":"18 C and light rain"}]}'
# Embeddings, offline: deterministic vectors from a hash of the text, labelled as the demo's.
curl -s localhost:8080/v1/embeddings -H "authorization: Bearer $KEY" -H 'content-type: application/json' \
  -d '{"model":"demo-embed","input":"Hello","dimensions":4}'
# A fallback route: its first model's provider is down, so demo-chat answers (x-tollway-* headers).
curl -si localhost:8080/v1/chat/completions -H "authorization: Bearer $KEY" -H 'content-type: application/json' \
  -d '{"model":"route:support-bot","messages":[{"role":"user","content":"Hello"}]}'
# A key limited to $0.05 a month: an answer costs about a cent, so the fifth is refused.
LIMITED=$(bin/tollway keys create --account acme --monthly-limit 0.05)
for i in 1 2 3 4 5; do curl -s -o /dev/null -w '%{http_code} ' localhost:8080/v1/chat/completions \
  -H "authorization: Bearer $LIMITED" -H 'content-type: application/json' \
  -d '{"model":"demo-chat","messages":[{"role":"user","content":"Hello"}]}'; done; echo   # 200 200 200 200 403
curl -s localhost:8080/v1/chat/completions -H "authorization: Bearer $LIMITED" -H 'content-type: application/json' \
  -d '{"model":"demo-chat","messages":[{"role":"user","content":"Hello"}]}'   # 403 spend_limit_exceeded
curl -s localhost:8080/v1/key -H "authorization: Bearer $LIMITED"   # the key's own view: spent_this_month, remaining
bin/tollway usage --account acme           # what was billed, per key and model
