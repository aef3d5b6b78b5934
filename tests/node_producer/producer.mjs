// An agenttrace producer that is not Python: a toy environment, traced with the official
// OpenTelemetry JS SDK in agenttrace's span conventions (docs/semantic-conventions.md,
// "Producers in other languages"), exported over OTLP/HTTP to an `agenttrace collect`.
//
//   node producer.mjs --url http://127.0.0.1:4318/v1/traces [--protocol proto|json]
//                     [--episodes 6] [--prefix walk]
//
// Without --url, the exporter reads OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (else its default).
// The script prints its own record of every episode (the values as the environment and the
// agent produced them, not as encoded) as one JSON object on stdout, and exits 1 if any
// export failed. tests/test_collect_node.py checks the rebuilt trajectories against that
// record.

import { ROOT_CONTEXT, trace } from "@opentelemetry/api";
import { ExportResultCode } from "@opentelemetry/core";
import { OTLPTraceExporter as JsonExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { OTLPTraceExporter as ProtoExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { BasicTracerProvider, BatchSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { ATTR_SERVICE_NAME } from "@opentelemetry/semantic-conventions";
import { parseArgs } from "node:util";

const { values: args } = parseArgs({
  options: {
    url: { type: "string" },
    protocol: { type: "string", default: "proto" },
    episodes: { type: "string", default: "6" },
    prefix: { type: "string", default: "walk" },
  },
});

// --- agenttrace's value encoding (docs/trajectory-format.md, "Value encoding") -------------
// Content attributes (rl.observation, rl.action, rl.info) are JSON text. Plain JSON values
// (numbers, strings, booleans, null, arrays, objects with string keys) are themselves; the
// two cases JSON.stringify would get wrong are tagged as agenttrace's codec tags them.
function tag(value) {
  if (typeof value === "number" && !Number.isFinite(value)) {
    // JSON.stringify writes null for these
    return { $float: Number.isNaN(value) ? "nan" : value > 0 ? "inf" : "-inf" };
  }
  if (Array.isArray(value)) return value.map(tag);
  if (value !== null && typeof value === "object") {
    const entries = Object.entries(value).map(([k, v]) => [k, tag(v)]);
    // a one-key object whose key starts with "$" would read as a tag: escaped as $dict
    if (entries.length === 1 && entries[0][0].startsWith("$")) return { $dict: entries };
    return Object.fromEntries(entries);
  }
  return value;
}
const encode = (value) => JSON.stringify(tag(value));

// --- a deterministic toy environment and agent ---------------------------------------------
// mulberry32: a small seeded PRNG, so every run gives the same episodes
function prng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// A 1-D random walk: the agent steps -1 or +1; reaching +GOAL ends the episode with reward 1,
// falling to -GOAL with reward -1 (terminated), and MAX_STEPS steps truncate it. Every other
// step costs a little (fractional rewards), and the observation carries a random "wind"
// reading (floats with all their digits).
const GOAL = 3;
const MAX_STEPS = 10;

class RandomWalk {
  reset(seed) {
    this.random = prng(seed);
    this.position = 0;
    this.t = 0;
    return [this.observe(), { seed, goal: GOAL }];
  }

  observe() {
    return { position: this.position, steps_left: MAX_STEPS - this.t, wind: this.random() };
  }

  step(action) {
    this.t += 1;
    this.position += action;
    const terminated = Math.abs(this.position) >= GOAL;
    const truncated = !terminated && this.t >= MAX_STEPS;
    let reward = -0.01 * (GOAL - this.position);
    if (terminated) reward = this.position > 0 ? 1 : -1;
    return [this.observe(), reward, terminated, truncated, { distance: GOAL - this.position }];
  }
}

// the agent: steps with the wind when it blows hard, else mostly right
function makeAgent(seed) {
  const random = prng(seed + 1000);
  return (observation) => (observation.wind > 0.8 || random() < 0.6 ? 1 : -1);
}

// --- tracing ---------------------------------------------------------------------------------
const Exporter = { proto: ProtoExporter, json: JsonExporter }[args.protocol];
if (Exporter === undefined) {
  console.error(`--protocol must be proto or json, not ${args.protocol}`);
  process.exit(2);
}
const failures = [];
const inner = new Exporter(args.url ? { url: args.url } : {});
// the SDK's exporter, noting every export that failed (so the script can say so)
const exporter = {
  export(spans, done) {
    inner.export(spans, (result) => {
      if (result.code !== ExportResultCode.SUCCESS) failures.push(String(result.error));
      done(result);
    });
  },
  shutdown: () => inner.shutdown(),
  forceFlush: () => inner.forceFlush(),
};
const provider = new BasicTracerProvider({
  resource: resourceFromAttributes({ [ATTR_SERVICE_NAME]: "node-random-walk" }),
  spanProcessors: [new BatchSpanProcessor(exporter)],
});
// Any tracer name will do: agenttrace reads spans by their names and rl.* attributes.
const tracer = provider.getTracer("node-random-walk", "1.0.0");

// No context manager is registered: each span is given its parent explicitly.
function child(name, parent, attributes) {
  return tracer.startSpan(name, { attributes }, trace.setSpan(ROOT_CONTEXT, parent));
}

function runEpisode(env, seed) {
  const episodeId = `${args.prefix}-${args.protocol}-${seed}`;
  const own = {
    episode_id: episodeId,
    task_id: `reach-${GOAL}`,
    seed,
    actions: [],
    rewards: [],
    observations: [], // what the agent acted on
    next_observations: [], // what each step returned
    infos: [],
    terminated: [],
    truncated: [],
  };
  const episode = tracer.startSpan("episode", {
    attributes: {
      "rl.episode.id": episodeId,
      "rl.task.id": own.task_id,
      "rl.env.name": "RandomWalk1D",
      "rl.agent.name": "node-agent",
      "rl.episode.seed": seed,
    },
  });
  const ids = { "rl.episode.id": episodeId };

  const reset = child("env.reset", episode, { ...ids, "rl.episode.seed": seed });
  let [observation, info] = env.reset(seed);
  reset.setAttributes({ "rl.observation": encode(observation), "rl.info": encode(info) });
  reset.end();
  own.reset_observation = observation;
  own.reset_info = info;

  const policy = makeAgent(seed);
  let total = 0;
  let done = false;
  for (let index = 0; !done; index++) {
    const step = { ...ids, "rl.timestep.index": index };
    const timestep = child("timestep", episode, step);

    const act = child("agent.act", timestep, step);
    const action = policy(observation);
    act.setAttributes({ "rl.observation": encode(observation), "rl.action": encode(action) });
    act.end();

    const envStep = child("env.step", timestep, { ...step, "rl.action": encode(action) });
    const [next, reward, terminated, truncated, stepInfo] = env.step(action);
    envStep.setAttributes({
      "rl.observation": encode(next),
      "rl.info": encode(stepInfo),
      // a JS number with an integral value (reward 1) goes out as an OTLP intValue: agenttrace
      // reads int and double alike
      "rl.reward": reward,
      "rl.terminated": terminated,
      "rl.truncated": truncated,
      "rl.done": terminated || truncated,
    });
    envStep.end();
    timestep.end();

    own.observations.push(observation);
    own.actions.push(action);
    own.rewards.push(reward);
    own.next_observations.push(next);
    own.infos.push(stepInfo);
    own.terminated.push(terminated);
    own.truncated.push(truncated);
    total += reward;
    observation = next;
    done = terminated || truncated;
  }
  own.return = total;
  own.length = own.actions.length;
  own.status = own.terminated.at(-1) ? "completed" : "truncated";
  episode.setAttributes({
    "rl.episode.status": own.status,
    "rl.episode.return": total,
    "rl.episode.length": own.length,
  });
  episode.end();
  return own;
}

const env = new RandomWalk();
const episodes = [];
for (let seed = 0; seed < Number(args.episodes); seed++) episodes.push(runEpisode(env, seed));
try {
  await provider.shutdown(); // flushes the batch processor: every span is exported, or failed
} catch (error) {
  failures.push(String(error));
}
console.log(JSON.stringify({ protocol: args.protocol, episodes }));
if (failures.length > 0) {
  console.error(`export failed: ${failures.join("; ")}`);
  process.exit(1);
}
