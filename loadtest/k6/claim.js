// Claim storm spread over the demo's replicas, with a check per status, thresholds, and a
// teardown that fails the run when the coupon was oversold.
//
//   REPLICA_URLS=http://127.0.0.1:3001,http://127.0.0.1:3002,http://127.0.0.1:3003 \
//     k6 run loadtest/k6/claim.js
//
// Environment: REPLICA_URLS (comma-separated, default http://127.0.0.1:3000), COUPON (id,
// default k6-<timestamp>), STOCK (100), USERS (1500 distinct users), VUS (48),
// ITERATIONS (3000), P99_MS (latency bound for the threshold, 2000).
import http from 'k6/http';
import exec from 'k6/execution';
import { check } from 'k6';
import { Counter } from 'k6/metrics';

const replicas = (__ENV.REPLICA_URLS || 'http://127.0.0.1:3000').split(',').map((url) => url.trim());
const stock = parseInt(__ENV.STOCK || '100', 10);
const users = parseInt(__ENV.USERS || '1500', 10);
const json = { headers: { 'content-type': 'application/json' } };

const serverErrors = new Counter('server_errors');
const oversold = new Counter('oversold');
const duplicateClaims = new Counter('duplicate_claims');

export const options = {
  scenarios: {
    claims: {
      executor: 'shared-iterations',
      vus: parseInt(__ENV.VUS || '48', 10),
      iterations: parseInt(__ENV.ITERATIONS || '3000', 10),
      maxDuration: '5m',
    },
  },
  thresholds: {
    server_errors: ['count==0'],
    oversold: ['count==0'],
    duplicate_claims: ['count==0'],
    'http_req_duration{scenario:claims}': [`p(99)<${parseInt(__ENV.P99_MS || '2000', 10)}`],
    checks: ['rate==1'],
  },
};

// The init code runs once per VU, so the coupon id is chosen once, here, and handed to all.
export function setup() {
  const coupon = __ENV.COUPON || `k6-${Date.now()}`;
  const seeded = http.put(`${replicas[0]}/coupons/${coupon}`, JSON.stringify({ stock }), json);
  if (seeded.status !== 200) {
    exec.test.abort(`could not create coupon ${coupon}: ${seeded.status} ${seeded.body}`);
  }
  return { coupon };
}

// 201 claimed, 409 already claimed by this user (or the lock stayed busy), 410 sold out.
const expected = http.expectedStatuses(201, 409, 410);

export default function ({ coupon }) {
  const replica = replicas[exec.scenario.iterationInTest % replicas.length];
  const user = `user-${Math.floor(Math.random() * users)}`;
  const res = http.post(`${replica}/coupons/${coupon}/claim`, JSON.stringify({ user_id: user }), {
    ...json,
    responseCallback: expected,
    tags: { name: 'claim' },
  });
  serverErrors.add(res.status >= 500 || res.status === 0 ? 1 : 0);
  check(res, {
    'claim answered 201, 409 or 410': (r) => [201, 409, 410].includes(r.status),
    '201 leaves a non-negative stock': (r) => r.status !== 201 || r.json('remaining') >= 0,
    '4xx is problem+json': (r) =>
      r.status < 400 || String(r.headers['Content-Type']).startsWith('application/problem+json'),
  });
}

export function teardown({ coupon }) {
  const res = http.get(`${replicas[0]}/coupons/${coupon}`);
  if (res.status !== 200) {
    exec.test.abort(`could not read coupon ${coupon}: ${res.status} ${res.body}`);
  }
  const summary = res.json();
  console.log(`coupon ${coupon}: ${JSON.stringify(summary)}`);
  oversold.add(summary.oversold);
  duplicateClaims.add(summary.duplicate_claims);
  if (summary.oversold > 0 || summary.duplicate_claims > 0) {
    const reason = `coupon ${coupon} oversold by ${summary.oversold}, ${summary.duplicate_claims} users hold it twice`;
    if (typeof exec.test.fail === 'function') {
      exec.test.fail(reason);
    } else {
      console.error(reason);
    }
  }
}
