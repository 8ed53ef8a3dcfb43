package server

// The decision walk: POST /v1/decisiones, stop by stop. Each stop is a
// function named here; read them in this order.
//
//  1. routes.go: the route {"/v1/decisiones", scope decisiones:pedir, class
//     decisiones, quota decisions, maxBody smallBody, h: handleDecide}.
//  2. server.go, wrap: a call with a trace id (X-Trace-Id), panic recovery;
//     on the way out the route's latency metric, the access log line and
//     the abuse guard's observation of the status.
//  3. server.go, serve, in the order of contract section 7:
//     authenticate (bearer token HMAC, credential active, tenant; 401) →
//     scope (403) → tenant paused (503) → disk reserve refuses writes (503 almacenamiento_lleno)
//     → rate limit per client and class, scaled by the abuse step (429) →
//     daily quota of decisions (quotas.go, checkQuota; 429) → readBody
//     (size and Content-Type; 413/415).
//  4. decisions.go, handleDecide: Idempotency-Key header and body validated
//     together against decisionSchema (server/schema; 422 with every field),
//     then an engine.Request.
//  5. engine/decide.go, Engine.Decide: tenant state and clock → for an
//     Idempotency-Key, the in-flight guard and the stored answer (replayed,
//     or 409 on another body) → the customer's lock → decideInto: customer
//     state (daily cap, 429; an open reward window answers with its
//     decision) → decideNew: fresh nonce, control group, customer features,
//     eligibility, campaign budget cut, the policy's scores and
//     exploration draw (exact propensity), budget reservation → the record,
//     its reward-queue entries, the customer state and the idempotency
//     answer in one batch, committed with Sync → console counters.
//  6. decisions.go again: the quota count (in memory, flushed with the
//     other counters), the decision metric, the 200 JSON answer.
//
// Errors from any stop reach errors.go's one writer (writeError), which
// maps kinds and validation errors to the contract's bodies and never
// echoes internals.
//
// The event walk (POST /v1/eventos) shares stops 1–3 (quota events) and
// goes on in events.go (validation per event; a client at the abuse
// guard's quarantine step has its batch held in quarantine instead) to
// engine/ingest.go (Ingest: idempotent per event_id,
// features, attribution, reward links, one synced batch).
