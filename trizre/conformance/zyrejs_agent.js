// The conformance agent for zyre.js (npm's Node.js ZRE implementation).
//
//     python -m trizre.conformance.zyrejs_agent      (finds node and zyre.js, runs this)
//
// It speaks the agent contract of trizre/conformance/_agent.py: JSON lines,
// `start` first.  zyre.js has no CURVE, no elections and no gossip, so it
// reports no public key, contests nothing and names no gossip hub (those
// cases are not applicable).  Its messages are one frame: a whisper or shout
// of several frames is refused with an `error` event.  zyre.js sends its
// beacons from the interface it is given, but it may pick another: the
// launcher runs it only inside a network namespace (trizre conformance --netns).
'use strict';

const readline = require('readline');
const Zyre = require('zyre.js');

function emit(event) {
  process.stdout.write(`${JSON.stringify(event)}\n`);
}

function frames(buffer) {
  return [Buffer.from(buffer).toString('base64')];
}

function one(cmd) {
  const parts = (cmd.frames || []).map((f) => Buffer.from(f, 'base64'));
  if (parts.length !== 1) throw new Error(`zyre.js sends one frame, not ${parts.length}`);
  return parts[0];
}

let zyre = null;
let stopping = false;

async function stop(code) {
  if (stopping) return;
  stopping = true;
  if (zyre !== null) await zyre.stop();
  process.exit(code);
}

async function start(cmd) {
  zyre = new Zyre({
    name: cmd.name,
    iface: cmd.interface,
    headers: cmd.headers || {},
    evasive: Math.round((cmd.evasive || 5) * 1000),
    expired: Math.round((cmd.expired || 30) * 1000),
    bport: cmd.port,
    binterval: Math.round((cmd.beacon_interval || 1) * 1000),
  });
  zyre.setEncoding(null); // raw buffers: the frames as they came
  zyre.on('connect', (id, name, headers) => emit({ event: 'ENTER', peer: id, name, headers }));
  zyre.on('disconnect', (id) => emit({ event: 'EXIT', peer: id }));
  zyre.on('whisper', (id, name, message) => emit({ event: 'WHISPER', peer: id, frames: frames(message) }));
  zyre.on('shout', (id, name, message, group) => emit({
    event: 'SHOUT', peer: id, group, frames: frames(message),
  }));
  zyre.on('join', (id, name, group) => emit({ event: 'JOIN', peer: id, group }));
  zyre.on('leave', (id, name, group) => emit({ event: 'LEAVE', peer: id, group }));
  await zyre.start();
  (cmd.groups || []).forEach((group) => zyre.join(group));
  const node = zyre._zyreNode || {};
  emit({
    event: 'started',
    uuid: zyre.getIdentity(),
    name: cmd.name,
    endpoint: node._endpoint,
    evasive: cmd.evasive,
    expired: cmd.expired,
    public_key: null,
    contest: [],
    gossip_endpoint: null,
  });
}

const lines = readline.createInterface({ input: process.stdin });
let queue = Promise.resolve();

function obey(line) {
  let cmd;
  try {
    cmd = JSON.parse(line);
  } catch (err) {
    emit({ event: 'error', error: String(err) });
    return Promise.resolve();
  }
  if (zyre === null) {
    if (cmd.cmd !== 'start') {
      emit({ event: 'error', error: "the first command must be 'start'" });
      return stop(2);
    }
    return start(cmd);
  }
  switch (cmd.cmd) {
    case 'stop': return stop(0);
    case 'join': zyre.join(cmd.group); break;
    case 'leave': zyre.leave(cmd.group); break;
    case 'whisper': zyre.whisper(cmd.peer, one(cmd)); break;
    case 'shout': zyre.shout(cmd.group, one(cmd)); break;
    default: emit({ event: 'error', error: `unknown command ${JSON.stringify(cmd.cmd)}` });
  }
  return Promise.resolve();
}

lines.on('line', (line) => {
  // One command at a time, in order: start is asynchronous.
  queue = queue.then(() => obey(line)).catch((err) => emit({ event: 'error', error: String(err) }));
});
lines.on('close', () => { queue.then(() => stop(0)); });
