#!/bin/bash
# Builds an earlier release's fixture with coupond at commit 8407ba5
# (2026-12-03), rich in the stored state added since 5a91376: usage
# make-8407ba5.sh COUPOND_BINARY DIR PORT CONSOLE_PORT. DIR/data is the data
# dir, DIR/backup a backup of it (its registry, DIR/data/backups.json,
# names DIR/backup by its absolute path: the test points it at its copy),
# DIR/crm.json the credentials the test uses, DIR/show-acme.json what that
# release's "admin tenant show acme --json" said at the end.
#
# Tenant "acme" (sandbox, daily quotas, explain scope): a catalog of three
# coupons with categorias, two campaigns with budgets, events of every
# tipo, 40 decisions (some with an Idempotency-Key, one in a campaign)
# confirmed ejecutada, modificada or rechazada, 30 decisions whose choice
# is a coupon (for the send gate's tests), a fallback record, an
# export, a webhook whose deliveries fail, a finished batch job, a history
# reload (50 customers more) that took the abuse guard's first step; a backup;
# cli-00007 deleted before the backup and cli-00011 after it (in its
# ledger); the clock moved 31 days so that the learner folds the rewards
# (a stored model of format 5, with its gate and guard), then 20 decisions
# more, 10 of them left unconfirmed. Tenant "tienda" (not sandbox, control
# group regla_actual, another reward window): shadow mode switched on
# through the console (a console session and its audit), decisions
# confirmed with accion_real.
set -eu
BIN=$1; DIR=$2; PORT=$3; CPORT=$4
export COUPOND_DATA_DIR=$DIR/data
API=http://127.0.0.1:$PORT; CON=http://127.0.0.1:$CPORT
mkdir -m 700 -p "$DIR" "$COUPOND_DATA_DIR"
LOG=$DIR.log
$BIN serve --webhook-allow-private --addr 127.0.0.1:$PORT --console-addr 127.0.0.1:$CPORT 2>>"$LOG" & SP=$!
trap 'kill $SP 2>/dev/null || true' EXIT
until curl -sf $API/readyz >/dev/null; do sleep 0.2; done
JSON='Content-Type: application/json'

$BIN admin tenant create acme --sandbox >/dev/null
$BIN admin tenant create tienda >/dev/null
$BIN admin tenant set acme --quota-decisions-day 500 --quota-events-day 5000 >/dev/null
$BIN admin tenant set tienda --control-kind regla_actual --control-share 0.1 --reward-window 14d --reward-grace 1d --optout-penalty-mxn 40 >/dev/null
SCOPES=eventos:publicar,decisiones:pedir,decisiones:confirmar,catalogo:escribir,campanas:escribir,clientes:borrar,clientes:exportar,webhooks:escribir,explicar:leer
for t in acme tienda; do
  $BIN admin credential create --tenant $t --name crm --json --scopes $SCOPES | jq "{tenant:\"$t\"} + ." > "$DIR/crm-$t.json"
done
$BIN admin credential create --tenant acme --name viejo --json --scopes eventos:publicar | jq -r .client_id > "$DIR/revoked"
$BIN admin credential revoke "$(cat "$DIR/revoked")" >/dev/null
jq -s . "$DIR/crm-acme.json" "$DIR/crm-tienda.json" > "$DIR/crm.json"; rm "$DIR/crm-acme.json" "$DIR/crm-tienda.json" "$DIR/revoked"
token() {
  curl -sf $API/v1/token -H "$JSON" -d "$(jq -c ".[] | select(.tenant==\"$1\") | {client_id, client_secret, grant_type:\"client_credentials\"}" "$DIR/crm.json")" | jq -r .access_token
}
A="Authorization: Bearer $(token acme)"; T="Authorization: Bearer $(token tienda)"
post() { curl -sf "$API$2" -H "$1" -H "$JSON" -d "$3"; }
put() { curl -sf -X PUT "$API$2" -H "$1" -H "$JSON" -d "$3" >/dev/null; }

CATALOG='{"acciones":[
  {"id":1,"nombre":"10% en abarrotes","tipo_cupon":"PCT10_ABARROTES","costo_envio_mxn":0.5,"descuento_max_mxn":50,"descuento_pct":10,"categorias":["abarrotes"]},
  {"id":2,"nombre":"$30","tipo_cupon":"MXN30","costo_envio_mxn":0.5,"descuento_max_mxn":30,"canales":["push","email"]},
  {"id":3,"nombre":"15% en bebidas","tipo_cupon":"PCT15_BEBIDAS","costo_envio_mxn":0.3,"descuento_max_mxn":40,"descuento_pct":15,"categorias":["bebidas","botanas"]}]}'
put "$A" /v1/catalogo-acciones "$CATALOG"; put "$T" /v1/catalogo-acciones "$CATALOG"
put "$A" /v1/campanas/navidad '{"canal":"email","descripcion":"Navidad","max_envios":100}'
put "$A" /v1/campanas/reyes '{"canal":"push","descripcion":"Reyes","max_envios":5,"max_descuento_mxn":100}'
put "$T" /v1/campanas/navidad '{"canal":"sms","descripcion":"Navidad","max_envios":50}'
put "$A" /v1/webhooks '{"url":"http://127.0.0.1:9/hook","eventos":["lote.completado"]}'

# events of every tipo: purchases in three categories, sign-ups, opt-outs
# of both kinds (all with the tenant's "now", its clock for acme).
now() { $BIN admin clock show --tenant acme --json | jq -r .now; }
purchases() { # TENANT_PREFIX TS FROM TO
  for i in $(seq $3 $4); do
    [ $1 = a2 ] && { [ $((i % 40)) = 7 ] || [ $((i % 40)) = 11 ]; } && continue # deleted
    c=$(printf 'cli-%05d' $((i % 40))); cat=$(echo abarrotes bebidas botanas | cut -d' ' -f$((i % 3 + 1)))
    echo "{\"event_id\":\"$1-tk-$i\",\"cliente_ref\":\"$c\",\"ts\":\"$2\",\"tipo\":\"COMPRA_CAT\",\"clave\":\"$cat\",\"valor\":$((100 + i)),\"extra\":{\"ticket_id\":\"$1-tk-$i\",\"margen\":$((20 + i % 7)),\"cantidad\":$((1 + i % 4)),\"tienda\":\"centro\",\"canal\":\"tienda\",\"ticket_total\":$((150 + i))}}"
  done | jq -s '{eventos:.}'
}
big() { # PREFIX TS STEP: one large ticket of every STEP-th of cli-00050..79
  for n in $(seq 50 $3 79); do
    echo "{\"event_id\":\"$1-$n\",\"cliente_ref\":\"cli-000$n\",\"ts\":\"$2\",\"tipo\":\"COMPRA_CAT\",\"clave\":\"bebidas\",\"valor\":$((2500 + 10 * n)),\"extra\":{\"ticket_id\":\"$1-$n\",\"margen\":1200}}"
  done | jq -s '{eventos:.}'
}
NOW=$(now)
post "$A" /v1/eventos "$(purchases a "$NOW" 1 200)" >/dev/null
post "$A" /v1/eventos "$(big b1 "$NOW" 1)" >/dev/null
post "$T" /v1/eventos "$(purchases t "$(date -u +%Y-%m-%dT%H:%M:%SZ)" 1 120)" >/dev/null
post "$A" /v1/eventos "{\"eventos\":[
  {\"event_id\":\"alta-1\",\"cliente_ref\":\"cli-00041\",\"ts\":\"$NOW\",\"tipo\":\"ALTA\",\"clave\":\"web\",\"extra\":{\"segmento\":\"oro\",\"perfil\":\"familia\"}},
  {\"event_id\":\"baja-1\",\"cliente_ref\":\"cli-00038\",\"ts\":\"$NOW\",\"tipo\":\"BAJA\",\"clave\":\"comunicaciones\",\"valor\":0,\"extra\":{\"canal\":\"email\"}},
  {\"event_id\":\"baja-2\",\"cliente_ref\":\"cli-00039\",\"ts\":\"$NOW\",\"tipo\":\"BAJA\",\"clave\":\"cuenta\"}]}" >/dev/null

# 40 decisions of acme, confirmed by n % 20: 0..9 ejecutada, 10..14
# modificada, 15..19 rechazada; cli-00035..39 left unconfirmed (they
# expire with the clock advance; cli-00030..39 of the second round do
# not); every fifth with an Idempotency-Key, cli-00020 in campaign reyes.
decide() { # AUTH CLIENT [CAMPAIGN] [KEY]
  local body="{\"cliente_ref\":\"$2\",\"contexto\":{\"canal\":\"push\"${3:+,\"campana_id\":\"$3\"}}}"
  if [ -n "${4:-}" ]; then curl -sf $API/v1/decisiones -H "$1" -H "$JSON" -H "Idempotency-Key: $4" -d "$body"
  else post "$1" /v1/decisiones "$body"; fi
}
confirm() { # AUTH DECISION BODY
  post "$1" /v1/decisiones/$2/ejecucion "$3" >/dev/null
}
received() { # CLIENT DECISION ACTION COUPON: a CUPON_RECIBIDO labelled with the decision, if it sent one
  [ "$3" = 0 ] && return 0
  local tipo; tipo=$(jq -r ".acciones[] | select(.id==$3) | .tipo_cupon" <<<"$CATALOG")
  post "$A" /v1/eventos "{\"eventos\":[{\"event_id\":\"rec-$4\",\"cliente_ref\":\"$1\",\"ts\":\"$(now)\",\"decision_id\":\"$2\",\"tipo\":\"CUPON_RECIBIDO\",\"clave\":\"$tipo\",\"valor\":30,\"extra\":{\"cupon_emitido_id\":\"$4\",\"campana_id\":\"navidad\",\"caducidad\":\"2027-06-30T00:00:00Z\",\"canal\":\"push\",\"descuento_pct\":10}}]}" >/dev/null
}
round() { # FROM TO KEYPREFIX UNCONFIRMED_FROM: decisions of acme, confirmed by position
  for n in $(seq $1 $2); do
    c=$(printf 'cli-%05d' $n); camp=; key=
    [ $n = 20 ] && camp=reyes; [ $((n % 5)) = 0 ] && key=$3-$n
    d=$(decide "$A" $c "$camp" "$key")
    id=$(echo "$d" | jq -r .decision_id); ac=$(echo "$d" | jq -r .accion)
    received $c $id $ac cup-$3-$n
    [ $n -ge $4 ] && continue
    case $((n % 20)) in
      [0-9]) confirm "$A" $id '{"ejecutada":true}' ;;
      1[0-4]) confirm "$A" $id '{"ejecutada":true,"accion_real":2}' ;;
      1[5-9]) confirm "$A" $id '{"ejecutada":false,"motivo_rechazo":"cliente sin consentimiento"}' ;;
    esac
  done
}
round 0 39 k1 35
# 30 occasional buyers of one large ticket, for whom the prior's choice is
# a coupon: their decisions fill the send gate's tests (per band) and the
# guard's once folded; every other one buys again within the window.
for n in $(seq 50 79); do
  d=$(decide "$A" cli-000$n); id=$(echo "$d" | jq -r .decision_id)
  received cli-000$n $id "$(echo "$d" | jq -r .accion)" cup-big-$n
  confirm "$A" $id '{"ejecutada":true}'
done
post "$A" /v1/eventos "$(big b2 "$(now)" 2)" >/dev/null
[ "$(decide "$A" cli-00005 "" k1-5 | jq -r .decision_id)" != "" ] # a replay of a stored Idempotency-Key
post "$A" /v1/decisiones/respaldo '{"accion":2,"canal":"caja","cliente_ref":"cli-00045","campana_id":"navidad"}' >/dev/null
NOW=$(now)
post "$A" /v1/eventos "{\"eventos\":[
  {\"event_id\":\"red-1\",\"cliente_ref\":\"cli-00001\",\"ts\":\"$NOW\",\"tipo\":\"CUPON_REDIMIDO\",\"clave\":\"MXN30\",\"valor\":30,\"extra\":{\"cupon_emitido_id\":\"cup-k1-1\",\"ticket_id\":\"red-tk-1\"}},
  {\"event_id\":\"cad-1\",\"cliente_ref\":\"cli-00002\",\"ts\":\"$NOW\",\"tipo\":\"CUPON_CADUCADO\",\"clave\":\"MXN30\",\"valor\":0,\"extra\":{\"cupon_emitido_id\":\"cup-k1-2\"}}]}" >/dev/null
curl -sf $API/v1/clientes/cli-00003/exportacion -H "$A" >/dev/null

JOB=$(post "$A" /v1/lotes-decision '{"campana_id":"navidad","segmento":{"todos":true}}' | jq -r .job_id)
until [ "$(curl -sf $API/v1/lotes-decision/$JOB -H "$A" | jq -r .estado)" = completado ]; do sleep 0.2; done

# a history reload by a credential of its own: 500 events sent twice, the
# abuse guard's first step (aviso) recorded for it.
$BIN admin credential create --tenant acme --name historial --json --scopes eventos:publicar > "$DIR/historial.json"
HIST="Authorization: Bearer $(curl -sf $API/v1/token -H "$JSON" -d "$(jq -c '{client_id, client_secret, grant_type:"client_credentials"}' "$DIR/historial.json")" | jq -r .access_token)"
rm "$DIR/historial.json"
HISTORY=$(for i in $(seq 0 499); do
  echo "{\"event_id\":\"h-$i\",\"cliente_ref\":\"cli-00$((100 + i % 50))\",\"ts\":\"$(date -u -d "@$(( $(date -d "$NOW" +%s) - 86400 * (1 + i % 300) ))" +%Y-%m-%dT%H:%M:%SZ)\",\"tipo\":\"COMPRA_CAT\",\"clave\":\"abarrotes\",\"valor\":$((50 + i % 90)),\"extra\":{\"ticket_id\":\"h-$i\",\"margen\":9}}"
done | jq -s '{eventos:.}')
post "$HIST" /v1/eventos "$HISTORY" >/dev/null; post "$HIST" /v1/eventos "$HISTORY" >/dev/null
[ "$($BIN admin abuse show --tenant acme --json | jq '[.. | objects | select(.level? == 1)] | length')" -ge 1 ]

# tienda: shadow mode switched on through the console.
LINK=$($BIN admin console login --url $CON | head -1)
JAR=$DIR.cookies
curl -sf -c "$JAR" -o /dev/null $CON/login -d "t=${LINK##*t=}"
CSRF=$(curl -sf -b "$JAR" $CON/ | grep -o 'name="csrf" value="[^"]*"' | head -1 | sed 's/.*value="//; s/"$//')
curl -sf -b "$JAR" -o /dev/null $CON/t/tienda/action -d "csrf=$CSRF&action=shadow-on&confirm=yes"
rm "$JAR"
for n in $(seq 0 19); do
  c=$(printf 'cli-%05d' $n)
  id=$(decide "$T" $c navidad | jq -r .decision_id)
  case $((n % 3)) in
    0) confirm "$T" $id '{"ejecutada":true,"accion_real":1}' ;;
    1) confirm "$T" $id '{"ejecutada":true,"accion_real":0}' ;;
    2) confirm "$T" $id '{"ejecutada":false,"motivo_rechazo":"regla actual"}' ;;
  esac
done

# a backup, with one deletion before it and one after it (in its ledger).
curl -sf -X DELETE $API/v1/clientes/cli-00007 -H "$A" >/dev/null
until $BIN admin deletions --tenant acme | grep -q completado; do sleep 0.2; done
$BIN admin backup --out "$DIR/backup" >/dev/null
curl -sf -X DELETE $API/v1/clientes/cli-00011 -H "$A" >/dev/null
until [ "$($BIN admin deletions --tenant acme --json | jq "[.deletions[] | select(.state==\"completado\")] | length")" = 2 ]; do sleep 0.2; done

$BIN admin clock advance --tenant acme --by 31d >/dev/null
until [ "$($BIN admin tenant show acme --json | jq .usage.rewards_learned)" -gt 0 ]; do sleep 0.5; done
A="Authorization: Bearer $(token acme)"
post "$A" /v1/eventos "$(purchases a2 "$(now)" 1 80)" >/dev/null
round 20 39 k2 30
$BIN admin tenant show acme --json > "$DIR/show-acme.json" # the release's view of its model
echo "job $JOB; acme $(jq -c .usage "$DIR/show-acme.json")"
kill $SP; wait $SP || true
