#!/bin/bash
# Builds a data dir with coupond at commit 5a91376 (the release before the
# policy package): usage: make.sh COUPOND_BINARY DATA_DIR PORT
# One sandbox tenant "acme" with a catalog of two coupons, a campaign, 200
# purchase events of 50 customers, 50 decisions confirmed ejecutada, a
# webhook, a finished batch job, a completed deletion of cli-00007, then
# the tenant clock moved 31 days so that the learner folds the rewards.
set -eu
BIN=$1; export COUPOND_DATA_DIR=$2; PORT=$3
API=http://127.0.0.1:$PORT
mkdir -m 700 -p "$COUPOND_DATA_DIR"
serve() { $BIN serve --webhook-allow-private --addr 127.0.0.1:$PORT 2>>"$COUPOND_DATA_DIR.log" & SP=$!; until curl -sf $API/readyz >/dev/null; do sleep 0.2; done; }
serve
$BIN admin tenant create acme --sandbox >/dev/null
$BIN admin credential create --tenant acme --name crm --json \
  --scopes eventos:publicar,decisiones:pedir,decisiones:confirmar,catalogo:escribir,campanas:escribir,clientes:borrar,clientes:exportar,webhooks:escribir \
  > "$COUPOND_DATA_DIR.crm.json"
CLIENT_ID=$(jq -r .client_id "$COUPOND_DATA_DIR.crm.json"); CLIENT_SECRET=$(jq -r .client_secret "$COUPOND_DATA_DIR.crm.json")
TOKEN=$(curl -s $API/v1/token -H 'Content-Type: application/json' \
  -d "{\"client_id\":\"$CLIENT_ID\",\"client_secret\":\"$CLIENT_SECRET\",\"grant_type\":\"client_credentials\"}" | jq -r .access_token)
AUTH="Authorization: Bearer $TOKEN"; JSON='Content-Type: application/json'
curl -sf -X PUT $API/v1/catalogo-acciones -H "$AUTH" -H "$JSON" -d '{"acciones":[
  {"id":1,"nombre":"10% en abarrotes","tipo_cupon":"PCT10_ABARROTES","costo_envio_mxn":0.5,"descuento_max_mxn":50,"descuento_pct":10},
  {"id":2,"nombre":"$30","tipo_cupon":"MXN30","costo_envio_mxn":0.5,"descuento_max_mxn":30}]}' >/dev/null
curl -sf -X PUT $API/v1/campanas/navidad -H "$AUTH" -H "$JSON" -d '{"canal":"email","descripcion":"Navidad","max_envios":100}' >/dev/null
NOW=$(date -u +%Y-%m-%dT%H:%M:%SZ)
for i in $(seq 1 200); do
  echo "{\"event_id\":\"tk-$i\",\"cliente_ref\":\"cli-0000$((i%50))\",\"ts\":\"$NOW\",\"tipo\":\"COMPRA_CAT\",\"clave\":\"abarrotes\",\"valor\":$((100+i)),\"extra\":{\"ticket_id\":\"tk-$i\",\"margen\":20}}"
done | jq -s '{eventos:.}' | curl -sf $API/v1/eventos -H "$AUTH" -H "$JSON" -d @- >/dev/null
for c in $(seq 0 49); do
  D=$(curl -sf $API/v1/decisiones -H "$AUTH" -H "$JSON" -d "{\"cliente_ref\":\"cli-0000$c\",\"contexto\":{\"canal\":\"push\"}}" | jq -r .decision_id)
  curl -sf $API/v1/decisiones/$D/ejecucion -H "$AUTH" -H "$JSON" -d '{"ejecutada":true}' >/dev/null
done
curl -sf -X PUT $API/v1/webhooks -H "$AUTH" -H "$JSON" -d '{"url":"http://127.0.0.1:9/hook","eventos":["lote.completado"]}' >/dev/null
JOB=$(curl -sf -X POST $API/v1/lotes-decision -H "$AUTH" -H "$JSON" -d '{"campana_id":"navidad","segmento":{"todos":true}}' | jq -r .job_id)
until [ "$(curl -sf $API/v1/lotes-decision/$JOB -H "$AUTH" | jq -r .estado)" = completado ]; do sleep 0.2; done
curl -sf -X DELETE $API/v1/clientes/cli-00007 -H "$AUTH" >/dev/null
until $BIN admin deletions --tenant acme | grep -q completado; do sleep 0.2; done
$BIN admin clock advance --tenant acme --by 31d >/dev/null
until [ "$($BIN admin tenant show acme --json | jq .usage.rewards_learned)" -gt 0 ]; do sleep 0.5; done
echo "job $JOB; $($BIN admin tenant show acme --json | jq -c .usage)"
kill $SP; wait $SP || true
