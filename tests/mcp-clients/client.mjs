// The official MCP TypeScript SDK (@modelcontextprotocol/sdk, pinned in package-lock.json)
// against a running paycred: over Streamable HTTP with the bearer token (its newest
// revision, the 2025-11-25 initialize handshake), it lists the tools and calls each one; no
// answer may hold the card's number or CVC. A client without a token is refused.
//
// Environment: PAYCRED_URL, PAYCRED_TOKEN (private role, project `dev`), PAYCRED_PM (the
// payment method of card PAYCRED_NUMBER, cvc PAYCRED_CVC).

import assert from 'node:assert/strict';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const { PAYCRED_URL: URL_, PAYCRED_TOKEN: TOKEN, PAYCRED_PM: PM } = process.env;
const SECRETS = [process.env.PAYCRED_NUMBER, `"${process.env.PAYCRED_CVC}"`];
const TOOLS = ['list_payment_methods', 'create_purchase_intent', 'get_purchase_intent',
  'cancel_purchase_intent', 'pay', 'create_browser_session'];

async function connect(token) {
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  const transport = new StreamableHTTPClientTransport(new URL(`${URL_}/mcp`), {
    requestInit: { headers },
  });
  const client = new Client({ name: 'paycred-ci', version: '1.0.0' });
  await client.connect(transport);
  return { client, transport };
}

async function call(client, name, args) {
  const result = await client.callTool({ name, arguments: args });
  const text = result.content[0].text;
  for (const secret of SECRETS) {
    assert.ok(!text.includes(secret), `${name}: a card value in ${text}`);
    assert.ok(!JSON.stringify(result.structuredContent ?? {}).includes(secret), name);
  }
  assert.equal(result.isError, false, `${name}: ${text}`);
  console.log(`  ${name}: ${text.slice(0, 160)}`);
  return result.structuredContent;
}

const template = (kind, field) => `{{ paymentMethod: ${PM} | type: '${kind}' | json: '$.${field}' }}`;

async function run() {
  const { client, transport } = await connect(TOKEN);
  console.log(`typescript sdk: protocol ${transport.protocolVersion}`);
  assert.equal(transport.protocolVersion, '2025-11-25');
  const { tools } = await client.listTools();
  assert.deepEqual(tools.map((t) => t.name), TOOLS);
  assert.ok(tools.every((t) => t.outputSchema));
  const methods = await call(client, 'list_payment_methods', {});
  assert.ok(methods.paymentMethods.some((m) => m.id === PM));
  const mandates = [{ type: 'maxAmount', value: '50.00', details: { currency: 'USD' } }];
  const vc = await call(client, 'create_purchase_intent',
    { paymentMethodId: PM, credentialType: 'virtual-card', mandates });
  assert.equal(vc.status, 'active');
  const pan = await call(client, 'create_purchase_intent',
    { paymentMethodId: PM, credentialType: 'pan', mandates });
  assert.equal(pan.last4, process.env.PAYCRED_NUMBER.slice(-4));
  const got = await call(client, 'get_purchase_intent', { id: pan.id });
  assert.equal(got.status, 'active');
  const body = Object.fromEntries(['number', 'cvc', 'expirationMonth', 'expirationYear']
    .map((f) => [f, template('virtual-card', f)]));
  Object.assign(body, { amount: '12.50', currency: 'USD' });
  const paid = await call(client, 'pay', {
    method: 'POST', url: `${URL_}/projects/dev/sandbox/authorizations`,
    headers: { Authorization: `Bearer ${TOKEN}` }, body,
  });
  assert.equal(paid.status, 200);
  assert.equal(paid.body.approved, true);
  const session = await call(client, 'create_browser_session',
    { purchaseIntentId: pan.id, allowedHosts: ['localhost'], ttl: 600 });
  assert.ok(session.proxy.password);
  const canceled = await call(client, 'cancel_purchase_intent', { id: vc.id });
  assert.equal(canceled.status, 'canceled');
  const missing = await client.callTool({ name: 'get_purchase_intent', arguments: { id: 'pi_nope' } });
  assert.equal(missing.isError, true);
  assert.equal(JSON.parse(missing.content[0].text).error.type, 'notFound');
  await client.close();
}

async function refused() {
  try {
    const { client } = await connect(undefined);
    await client.listTools();
  } catch (e) {
    console.log(`typescript sdk, no token: refused (${e.constructor.name}: ${String(e.message).slice(0, 80)})`);
    return;
  }
  throw new Error('a client without a token listed the tools');
}

const bounded = (p, ms) => Promise.race([p,
  new Promise((_, reject) => setTimeout(() => reject(new Error('timed out')), ms).unref())]);

await bounded(run(), 60_000);
await bounded(refused(), 30_000);
console.log('typescript sdk: ok');
