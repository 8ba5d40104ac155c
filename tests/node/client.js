// The official RocketMQ 5 Node.js client (rocketmq-client-nodejs, pinned in package.json) driven
// by JSON lines, so one node process serves a whole test or benchmark run.
//
//   node tests/node/client.js      (stdin: one command per line; stdout: one JSON line per answer)
//
// A command is {"id": N, "op": OP, ...}; its answer is {"id": N, "ok": true, ...} or
// {"id": N, "ok": false, "error": "..."}, in order, one command at a time. The ops:
//   producer {access_point, topics, request_timeout_ms}
//   send {topic, body | body_size, tag, keys, properties}          -> {message_id}
//   consumer {access_point, group, topic, tag, await_ms}             (a SimpleConsumer)
//   receive {max, invisible_ms}                                      -> {messages: [...]}
//   ack {message_id}, change_invisible {message_id, invisible_ms}    (a message received here)
//   send_every {topic, interval_ms, prefix}: starts one send every interval_ms, whether the
//     earlier ones have ended or not, each reported when it ends as an event line
//     {"event": "send", seq, body, t0, t1 (wall-clock seconds), ok, message_id, error}
//   stop_sending: stops starting sends, waits for those in flight -> {started}
//   shutdown: shuts every client down, answers, exits
// The client's own log goes to stderr.

const readline = require('node:readline');
const util = require('node:util');
const { Producer, SimpleConsumer } = require('rocketmq-client-nodejs');

const logger = {};
for (const level of [ 'info', 'warn', 'error' ]) {
  logger[level] = (...args) => process.stderr.write(`${new Date().toISOString()} ${level} ${util.format(...args)}\n`);
}

let producer = null;
let consumer = null;
const received = new Map(); // message id -> the client's MessageView, for ack and change_invisible
let sending = null; // the send_every loop: {stop, started, inFlight}

function emit(line) {
  process.stdout.write(JSON.stringify(line) + '\n');
}

function errorText(error) {
  return String(error && error.message || error);
}

function message(command) {
  const body = command.body_size === undefined ? Buffer.from(command.body) : Buffer.alloc(command.body_size, 'x');
  return {
    topic: command.topic,
    body,
    tag: command.tag,
    keys: command.keys || [],
    properties: command.properties ? new Map(Object.entries(command.properties)) : undefined,
  };
}

function view(received) {
  return {
    message_id: received.messageId,
    topic: received.topic,
    body: received.body.toString(),
    tag: received.tag === undefined ? null : received.tag,
    keys: received.keys,
    properties: Object.fromEntries(received.properties),
    delivery_attempt: received.deliveryAttempt,
  };
}

function receivedMessage(messageId) {
  const found = received.get(messageId);
  if (!found) throw new Error(`no message ${messageId} was received here`);
  return found;
}

function sendEvery({ topic, interval_ms: intervalMs, prefix = 'node' }) {
  const state = { stopped: false, started: 0, inFlight: new Set() };
  (async () => {
    while (!state.stopped) {
      const seq = state.started++;
      const body = `${prefix}-${seq}`;
      const t0 = Date.now() / 1000;
      const send = producer.send({ topic, body: Buffer.from(body) }).then(
        receipt => ({ ok: true, message_id: receipt.messageId, error: null }),
        error => ({ ok: false, message_id: null, error: errorText(error) }),
      ).then(outcome => {
        emit({ event: 'send', seq, body, t0, t1: Date.now() / 1000, ...outcome });
        state.inFlight.delete(send);
      });
      state.inFlight.add(send);
      await new Promise(resolve => setTimeout(resolve, intervalMs));
    }
  })();
  return state;
}

const ops = {
  async producer({ access_point, topics, request_timeout_ms = 3000 }) {
    producer = new Producer({ endpoints: access_point, namespace: '', topics, requestTimeout: request_timeout_ms, logger });
    await producer.startup();
  },
  async send(command) {
    const receipt = await producer.send(message(command));
    return { message_id: receipt.messageId };
  },
  async consumer({ access_point, group, topic, tag = '*', await_ms = 1000, request_timeout_ms = 3000 }) {
    consumer = new SimpleConsumer({
      endpoints: access_point, namespace: '', consumerGroup: group, subscriptions: new Map([[ topic, tag ]]),
      awaitDuration: await_ms, requestTimeout: request_timeout_ms, logger,
    });
    await consumer.startup();
  },
  async receive({ max = 32, invisible_ms = 15000 }) {
    const messages = await consumer.receive(max, invisible_ms);
    for (const one of messages) received.set(one.messageId, one);
    return { messages: messages.map(view) };
  },
  async ack({ message_id }) {
    await consumer.ack(receivedMessage(message_id));
  },
  async change_invisible({ message_id, invisible_ms }) {
    await consumer.changeInvisibleDuration(receivedMessage(message_id), invisible_ms);
  },
  async send_every(command) {
    sending = sendEvery(command);
  },
  async stop_sending() {
    sending.stopped = true;
    await Promise.all(sending.inFlight);
    return { started: sending.started };
  },
  async shutdown() {
    for (const client of [ producer, consumer ]) {
      if (client) await client.shutdown();
    }
  },
};

async function main() {
  for await (const line of readline.createInterface({ input: process.stdin })) {
    if (!line.trim()) continue;
    const command = JSON.parse(line);
    try {
      const result = await ops[command.op](command);
      emit({ id: command.id, ok: true, ...result });
    } catch (error) {
      emit({ id: command.id, ok: false, error: errorText(error) });
    }
    if (command.op === 'shutdown') break;
  }
  process.exit(0);
}

main();
