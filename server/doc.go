package server

// The decision walk: POST /v1/decisiones, stop by stop. Each stop is a
// function named here; read them in this order. The server asks the engine
// once; after the engine nothing but the pipeline's answer writer runs.
//
//  1. routes.go: the route {"/v1/decisiones", scope decisiones:pedir, class
//     decisiones, quota decisions, maxBody smallBody, h: handleDecide}.
//  2. server.go, wrap: a call with a trace id (X-Trace-Id), panic recovery;
//     a request with both Content-Length and Transfer-Encoding is answered
//     400 there, before serve (conn.go, smuggled); on the way out the
//     route's latency metric, the access log line and the abuse guard's
//     observation of the status (and of call.reloaded).
//  3. server.go, serve, in the order of contract section 7:
//     authenticate (bearer token HMAC, credential active, tenant; 401) →
//     scope (403) → tenant paused (503) → disk reserve refuses writes (503
//     almacenamiento_lleno) → rate limit per client and class, scaled by
//     the abuse step (429) → daily quota of decisions (quotas.go,
//     checkQuota, which asks engine/quotas.go, Quotas.CheckQuota; 429 with
//     Retry-After to the tenant's midnight; for a request with an
//     Idempotency-Key, which may be a replay, the 429 is held back in
//     call.overQuota (quotas.go, mayReplay) and answers every refusal of
//     the request (pastQuota): only a replay gets past it, and the 409 of a
//     key whose first request still runs, idemConflict) → readBody (size
//     and Content-Type; 413/415).
//  4. decisions.go, handleDecide: Idempotency-Key header and body validated
//     together (decode.go → server/schema: decode.go, parse.go, schema.go;
//     422 with every field), then an engine.Request.
//  5. engine/decide.go, Engine.Decide: tenant state and clock → for an
//     Idempotency-Key, the replay (store/idempotency.go: the stored answer
//     replayed whatever the day's quota and cap, or 409 on another body),
//     looked up before the in-flight guard and again under it (a retry
//     beside another retry is a replay; only a key not answered yet is
//     409 while its first request runs) → otherwise decideCounted: one unit of the tenant's
//     daily quota of decisions reserved, checked and counted in one step
//     (engine/quotas.go; a request checkQuota let in whose unit a
//     concurrent one took is 429 here), given back when the request then
//     fails → decideAndCommit: the customer's lock → decideInto: customer state
//     (daily cap: DayLimitError with its Retry-After, 429; an open reward
//     window answers with its decision) → decideNew: fresh nonce, control
//     group, customer features, eligibility, campaign budget cut, the
//     policy's scores and exploration draw (exact propensity), budget
//     reservation → the record, its reward-queue entries, the customer
//     state and the idempotency answer in one batch, committed with Sync,
//     and the new record counted for the console (engine/counters.go).
//  6. back in wrap, the one answer writer: handleDecide set call.answer
//     (200 and the Decision); the pipeline counts it in the business
//     series (business.go, answered) and writes it (errors.go, writeJSON).
//
// Errors from any stop reach errors.go's one writer (writeError), which
// maps kinds and validation errors to the contract's bodies and never
// echoes internals.
//
// The event walk (POST /v1/eventos) shares stops 1–3 (quota events; its
// 429 always held back, since a resend of accepted events takes nothing
// and is answered past the quota, events.go) and
// goes on in events.go: the abuse step of the client, then validation per
// event (rejected events are listed, not fatal) → engine/receive.go,
// Ingester.Receive, the one call: for a client at the abuse guard's
// quarantine step the events are held (store/quarantine.go, HoldBatch, with
// the held-event index that answers a resend of a held event as a duplicate);
// otherwise engine/ingest.go, Ingest (decision_id signature, idempotent per
// event_id; the accepted events taken from the daily quota of events in
// one step with its check, ErrQuota and 429 for a request they do not fit,
// nothing applied; event, customer index, features, attribution links and
// quality counters in one synced batch), then the console counters →
// call.answer with the counts; a history reload is noted
// in call.reloaded for the abuse guard, which hears it in wrap.
