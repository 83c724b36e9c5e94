// The Application API as one typed model. It mirrors crds/application.yaml field for field: the
// same defaults, limits and cross-field rules (the CEL rules, with the same messages), so the
// operator can trust a parsed Application exactly as far as the API server does. Messages of
// the schema-level checks follow the API server's wording ("Required value", "Unsupported
// value", "should be less than or equal to") so both read alike in a status condition.

import { z } from 'zod';
import {
  NOTIFICATION_EVENTS, type NotificationEvent,
  API_VERSION, CHECK_PHASES, DEFAULT_DRAIN_SECONDS, KIND, MAX_BLUE_GREEN_NAME_LENGTH, MAX_NAME_LENGTH, Phase, Reason, ROUTERS, RolloutPhase, STABLE_VERSION, STRATEGIES, type RolloutRouterName, type RouterName,
} from './constants.ts';
import { imageAtVersion } from './image.ts';
import { parseQuantity } from './quantity.ts';
import {
  DNS1035_LABEL, DNS1123_LABEL, DNS1123_SUBDOMAIN, LABEL_VALUE, WHITESPACE, bool, digestOk, duration, int, intOrString, issuesMessage, list, oneOf,
  str, typeError, uniqueBy,
} from './schema.ts';

export { parseDuration } from './schema.ts';

const ENV_NAME = /^[-._a-zA-Z][-._a-zA-Z0-9]*$/;
const RETRY_ON = /^[a-z0-9-]+(,[a-z0-9-]+)*$/;

// A path that names one directory in several ways (/etc/x/, /etc//x, /etc/./x, /etc/x/., /etc/y/../x) would be
// several mounts of one path, or a mount that is not where the spec seems to put it: only the canonical form goes.
const NON_CANONICAL_SEGMENT = /\/\/|\/\.\.?(\/|$)/;
const DOT_DOT_SEGMENT = /\/\.\.(\/|$)/;

/** `path` (absolute) without empty, '.' and '..' segments or a trailing '/'. */
export function canonicalMountPath(path: string): string {
  const segments: string[] = [];
  for (const s of path.split('/')) {
    if (s === '..') segments.pop();
    else if (s !== '' && s !== '.') segments.push(s);
  }
  return `/${segments.join('/')}`;
}

const mountPath = () => str(1024)
  .refine((s) => s.startsWith('/'), 'mountPath must be an absolute path')
  .refine((s) => s === '/' || !s.endsWith('/'), "mountPath must not end with '/' (/etc/x and /etc/x/ are the same mount)")
  .superRefine((s, ctx) => {
    if (!s.startsWith('/') || !NON_CANONICAL_SEGMENT.test(s)) return;
    // The CRD's messageExpression says the same up to the canonical form, which CEL cannot compute within the
    // API server's cost budget (a split and join of a 1024-character path costs over 100 times too much).
    const segment = DOT_DOT_SEGMENT.test(s) ? 'a .. segment' : 'an empty or . segment';
    ctx.addIssue({ code: 'custom', message: `mountPath must be canonical: ${s} has ${segment} (write ${canonicalMountPath(s)})` });
  });

// A container port name (IANA_SVC_NAME), what the CEL rules spell out with size/matches/contains.
function isPortName(s: string): boolean {
  return s.length <= 15 && DNS1123_LABEL.test(s) && /[a-z]/.test(s) && !s.includes('--');
}

function isNonNegativeQuantity(v: string | number): boolean {
  const q = parseQuantity(v);
  return q !== null && q >= 0n;
}

// --- core/v1 pieces ---

const quantitySchema = intOrString(64).refine(isNonNegativeQuantity, 'must be a non-negative quantity such as 500m, 2, 128Mi or 1Gi');

const quantityMap = z
  .record(z.string(), quantitySchema, { error: typeError('object') })
  .refine((m) => Object.keys(m).length <= 16, { error: (issue) => `Too many: ${Object.keys(issue.input as object).length}: must have at most 16 items` });

const resourcesSchema = z
  .object({
    limits: quantityMap.optional(),
    requests: quantityMap.optional(),
    claims: list(z.object({ name: str(63), request: str(63).optional() }), 16).superRefine(uniqueBy('name')).optional(),
  })
  .superRefine((r, ctx) => {
    const { requests, limits } = r;
    if (!requests || !limits) return;
    const exceeds = Object.entries(requests).some(([name, request]) => {
      const limit = limits[name];
      if (limit === undefined) return false;
      const [req, lim] = [parseQuantity(String(request)), parseQuantity(String(limit))];
      return req !== null && lim !== null && req > lim;
    });
    if (exceeds) ctx.addIssue({ code: 'custom', message: 'resources.requests must not exceed resources.limits for the same resource' });
  });

const keySelector = z.object({ name: str(253).optional(), key: str(253), optional: bool().optional() });

const envVarSchema = z
  .object({
    name: str(256).refine((s) => ENV_NAME.test(s), "env var name must consist of letters, digits, '_', '-' or '.', and must not start with a digit"),
    value: str(32768).optional(),
    valueFrom: z
      .object({
        secretKeyRef: keySelector.optional(),
        configMapKeyRef: keySelector.optional(),
        fieldRef: z.object({ apiVersion: str(64).optional(), fieldPath: str(256) }).optional(),
        resourceFieldRef: z.object({ containerName: str(63).optional(), divisor: quantitySchema.optional(), resource: str(64) }).optional(),
      })
      .refine(
        (v) => [v.secretKeyRef, v.configMapKeyRef, v.fieldRef, v.resourceFieldRef].filter((x) => x !== undefined).length === 1,
        'valueFrom must set exactly one of secretKeyRef, configMapKeyRef, fieldRef or resourceFieldRef',
      )
      .optional(),
  })
  .refine((e) => !(e.value !== undefined && e.valueFrom !== undefined), 'env var must set value or valueFrom, not both');

const probePort = intOrString(63).refine(
  (p) => (typeof p === 'number' ? p >= 1 && p <= 65535 : isPortName(p)),
  'probe port must be a number between 1 and 65535 or a container port name',
);

const probeSchema = z
  .object({
    exec: z.object({ command: list(str(4096), 64).optional() }).optional(),
    httpGet: z
      .object({
        host: str(253).optional(),
        httpHeaders: list(z.object({ name: str(256), value: str(4096) }), 32).optional(),
        path: str(2048).optional(),
        port: probePort,
        scheme: oneOf(['HTTP', 'HTTPS']).default('HTTP'),
      })
      .optional(),
    tcpSocket: z.object({ host: str(253).optional(), port: probePort }).optional(),
    grpc: z.object({ port: int(1, 65535), service: str(256).optional() }).optional(),
    initialDelaySeconds: int(0).optional(),
    periodSeconds: int(1).optional(),
    timeoutSeconds: int(1).optional(),
    successThreshold: int(1).optional(),
    failureThreshold: int(1).optional(),
    terminationGracePeriodSeconds: int(1).optional(),
  })
  .refine(
    (p) => [p.exec, p.httpGet, p.tcpSocket, p.grpc].filter((x) => x !== undefined).length === 1,
    'a probe must set exactly one of exec, httpGet, tcpSocket or grpc',
  );

// --- the Application spec ---

const servicePortSchema = z.object({
  name: str(63).refine(isPortName, "port name must be at most 15 lowercase letters, digits or '-', contain a letter, start and end with a letter or digit, and have no '--'").optional(),
  port: int(1, 65535),
  enableIstioProxy: bool().default(true),
});

const serviceSchema = z.object({
  type: oneOf(['ClusterIP', 'NodePort', 'LoadBalancer']).default('ClusterIP'),
  ports: list(servicePortSchema, 20)
    .refine((ports) => ports.length >= 1, 'service.ports must list at least one port')
    .refine((ports) => new Set(ports.map((p) => p.port)).size === ports.length, 'service port numbers must be unique')
    .refine((ports) => ports.length <= 1 || ports.every((p) => p.name !== undefined), 'every service port needs a name when there is more than one')
    .refine((ports) => {
      const named = ports.flatMap((p) => (p.name === undefined ? [] : [p.name]));
      return new Set(named).size === named.length;
    }, 'service port names must be unique')
    .prefault([{ name: 'http', port: 80 }]),
});

const configMapMountSchema = z.object({
  name: str(253).refine(
    (s) => s.length <= 60 && DNS1123_LABEL.test(s),
    'configMaps[].name must be a DNS-1123 label of at most 60 characters (it also names the pod volume cm-<name>)',
  ),
  mountPath: mountPath(),
  readOnly: bool().default(true),
});

const storageSchema = z.object({
  size: str(64).refine((s) => {
    const q = parseQuantity(s);
    return q !== null && q > 0n;
  }, 'storage.size must be a positive quantity such as 1Gi or 500Mi'),
  storageClass: str(253).refine((s) => s === '' || DNS1123_SUBDOMAIN.test(s), 'storageClass must be a DNS subdomain name').optional(),
  accessMode: oneOf(['ReadWriteOnce', 'ReadOnlyMany', 'ReadWriteMany', 'ReadWriteOncePod']).default('ReadWriteOnce'),
  mountPath: mountPath().default('/data'),
});

const healthCheckSchema = z
  .object({
    livenessProbe: probeSchema.optional(),
    readinessProbe: probeSchema.optional(),
    startupProbe: probeSchema.optional(),
  })
  .superRefine((h, ctx) => {
    if (h.livenessProbe?.successThreshold !== undefined && h.livenessProbe.successThreshold !== 1) {
      ctx.addIssue({ code: 'custom', path: ['livenessProbe', 'successThreshold'], message: 'livenessProbe.successThreshold must be 1' });
    }
    if (h.startupProbe?.successThreshold !== undefined && h.startupProbe.successThreshold !== 1) {
      ctx.addIssue({ code: 'custom', path: ['startupProbe', 'successThreshold'], message: 'startupProbe.successThreshold must be 1' });
    }
    if (h.readinessProbe?.terminationGracePeriodSeconds !== undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['readinessProbe', 'terminationGracePeriodSeconds'],
        message: 'readinessProbe must not set terminationGracePeriodSeconds',
      });
    }
  });

const autoscalingSchema = z
  .object({
    enabled: bool().default(false),
    minReplicas: int(1, 100).default(1),
    maxReplicas: int(1, 100).optional(),
    targetCPU: int(1, 100).optional(),
    targetMemory: int(1, 100).optional(),
  })
  .superRefine((a, ctx) => {
    if (a.enabled && a.maxReplicas === undefined) {
      ctx.addIssue({ code: 'custom', path: ['maxReplicas'], message: 'autoscaling.maxReplicas is required when autoscaling is enabled' });
    }
    if (a.maxReplicas !== undefined && a.minReplicas > a.maxReplicas) {
      ctx.addIssue({ code: 'custom', path: ['minReplicas'], message: 'autoscaling.minReplicas must not exceed maxReplicas' });
    }
    if (a.enabled && a.targetCPU === undefined && a.targetMemory === undefined) {
      ctx.addIssue({ code: 'custom', message: 'autoscaling needs targetCPU or targetMemory when enabled' });
    }
  });

const trafficPolicySchema = z.object({
  connectionTimeout: duration('connectionTimeout must be a duration of at least 1ms such as 500ms, 10s or 1m (units ms, s, m, h)', 1).default('10s'),
  loadBalancer: oneOf(['ROUND_ROBIN', 'LEAST_CONN', 'LEAST_REQUEST', 'RANDOM', 'PASSTHROUGH']).default('ROUND_ROBIN'),
  retryPolicy: z
    .object({
      attempts: int(0, 10).optional(),
      perTryTimeout: duration('perTryTimeout must be a duration of at least 1ms such as 500ms or 2s (units ms, s, m, h)', 1).optional(),
      retryOn: str(256)
        .refine((s) => RETRY_ON.test(s), 'retryOn must be a comma-separated list of retry conditions such as 5xx,connect-failure,reset')
        .optional(),
    })
    .optional(),
});

const weight = (field: string) => z.int({ error: typeError('integer') }).refine((w) => w >= 0 && w <= 100, `${field} must be between 0 and 100`);

const HEADER_NAME = /^[a-z0-9][-a-z0-9_.]*$/;
const COOKIE_NAME = /^[A-Za-z0-9!#$%&*+.^_|~-]+$/;

/** A header's or cookie's value to match: what a route can say (the Gateway API refuses an empty one). */
const matchValue = () => str(1024).min(1, 'should be at least 1 chars long');

/**
 * Why a regex does not compile, or undefined. JavaScript's dialect stands in for RE2 here, which the API server's
 * CEL rule checks exactly (`''.matches(self.regex)` fails to evaluate on a bad one); they differ only on what RE2
 * lacks (look-arounds, back-references), which the API server refuses.
 */
function regexError(s: string): string | undefined {
  try {
    new RegExp(s);
    return undefined;
  } catch (err) {
    return err instanceof Error ? err.message : String(err);
  }
}

const routeMatchSchema = z
  .object({
    header: str(256).refine((s) => HEADER_NAME.test(s), 'header must be a lowercase header name such as x-canary').optional(),
    cookie: str(256).refine((s) => COOKIE_NAME.test(s), 'cookie must be a cookie name (letters, digits and !#$%&*+.^_|~-)').optional(),
    exact: matchValue().optional(),
    prefix: matchValue().optional(),
    regex: matchValue().refine((s) => regexError(s) === undefined, { error: (i) => `regex must be an RE2 regular expression: error parsing regexp: ${regexError(String(i.input))}` }).optional(),
  })
  .refine((m) => (m.header !== undefined) !== (m.cookie !== undefined), 'each match sets exactly one of header or cookie')
  .refine((m) => [m.exact, m.prefix, m.regex].filter((x) => x !== undefined).length === 1, 'each match sets exactly one of exact, prefix or regex')
  .refine((m) => m.cookie === undefined || m.exact !== undefined, 'a cookie match needs exact');

// What every rollout step may do; an Application's steps may also run a check (a Release has no checks).
const stepActions = {
  setWeight: weight('setWeight').optional(),
  pause: z
    .object({
      duration: duration('pause.duration must be a duration such as 30s, 5m or 1h30m (units ms, s, m, h)', null).optional(),
    })
    .optional(),
  setHeaderRoute: z.object({ match: list(routeMatchSchema, 8).optional() }).optional(),
  setMirrorRoute: z.object({ percentage: int(0, 100) }).optional(),
};

/** A step of a Release (the kinds every rollout step shares). */
export const canaryStepSchema = z
  .object(stepActions)
  .refine(
    (s) => [s.setWeight, s.pause, s.setHeaderRoute, s.setMirrorRoute].filter((x) => x !== undefined).length === 1,
    'each step must set exactly one of setWeight, pause, setHeaderRoute or setMirrorRoute',
  );

const checkName = (field: string) => str(63).refine((s) => DNS1123_LABEL.test(s), `${field} must be a DNS label (lowercase letters, digits and '-')`);

/** A step of an Application's rollout: a Release's kinds, or `check`, which runs a check of canary.checks by name. */
const rolloutStepSchema = z
  .object({ ...stepActions, check: str(63).optional() })
  .refine(
    (s) => [s.setWeight, s.pause, s.setHeaderRoute, s.setMirrorRoute, s.check].filter((x) => x !== undefined).length === 1,
    'each step must set exactly one of setWeight, pause, setHeaderRoute, setMirrorRoute or check',
  );

const HTTP_URL = /^https?:\/\/[^/\s]+(\/[^\s]*)?$/;
// An HTTP header name (an RFC 9110 token): fetch refuses anything else.
const HEADER_TOKEN = /^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/;

const httpCheckSchema = z.object({
  url: str(2048).refine((s) => HTTP_URL.test(s), 'http.url must be an http or https URL such as http://smoke.tests.svc:8080/run'),
  method: oneOf(['GET', 'POST']).default('POST'),
  headers: z
    .record(z.string(), str(4096), { error: typeError('object') })
    .refine((m) => Object.keys(m).every((k) => k.length <= 256 && HEADER_TOKEN.test(k)), 'http.headers names must be HTTP header names (letters, digits and !#$%&\'*+.^_`|~-)')
    .refine((m) => Object.keys(m).length <= 16, { error: (issue) => `Too many: ${Object.keys(issue.input as object).length}: must have at most 16 items` })
    .optional(),
  timeoutSeconds: int(1, 300).default(10),
  retries: int(0, 10).default(0),
  confirm: bool().default(false),
  intervalSeconds: int(1, 3600).default(10),
});

// A PodSpec: the API server checks it when the Job is created; here only that it runs a container at all.
const jobTemplateSchema = z
  .record(z.string(), z.unknown(), { error: typeError('object') })
  .refine((t) => Array.isArray(t['containers']) && t['containers'].length > 0, 'job.template must be a pod spec whose containers lists at least one container');

const jobCheckSchema = z.object({
  template: jobTemplateSchema,
  timeoutSeconds: int(1, 86400).default(600),
});

const checkSchema = z
  .object({
    name: checkName('check name'),
    phase: oneOf(CHECK_PHASES).optional(),
    http: httpCheckSchema.optional(),
    job: jobCheckSchema.optional(),
  })
  .refine((c) => (c.http !== undefined) !== (c.job !== undefined), 'each check sets exactly one of http or job');

/** The variables a metric's query may use. */
export const queryVariables = ['namespace', 'name', 'canaryVersion', 'stableVersion', 'canaryWorkload', 'stableWorkload', 'interval'] as const;
export const metricTemplates = ['request-success-rate', 'request-duration'] as const;

const analysisMetricSchema = z
  .object({
    name: str(63).refine((s) => DNS1123_LABEL.test(s), "metric name must be lowercase letters, digits and '-'"),
    query: str(4096)
      .refine((q) => [...q.matchAll(/[{][{][^}]*[}][}]/g)].every((m) => (queryVariables as readonly string[]).map((v) => `{{${v}}}`).includes(m[0])),
        `query may use only ${queryVariables.map((v) => `{{${v}}}`).join(', ').replace(/, ([^,]*)$/, ' and $1')}`)
      .optional(),
    template: oneOf(metricTemplates).optional(),
    thresholdRange: z
      .object({ min: z.number({ error: typeError('number') }).optional(), max: z.number({ error: typeError('number') }).optional() })
      .refine((r) => r.min !== undefined || r.max !== undefined, 'thresholdRange needs min, max or both')
      .refine((r) => r.min === undefined || r.max === undefined || r.min <= r.max, 'thresholdRange.min must not exceed thresholdRange.max'),
    failureLimit: int(1).default(2),
    inconclusiveLimit: int(1).default(3),
    dryRun: bool().default(false),
  })
  .refine((m) => (m.query !== undefined) !== (m.template !== undefined), 'each metric sets exactly one of query or template');

export const analysisSchema = z.object({
  interval: duration('analysis.interval must be a duration of at least 1s such as 30s or 1m (units ms, s, m, h)', 1000).default('30s'),
  prometheusAddress: str(512)
    .refine((s) => HTTP_URL.test(s), 'analysis.prometheusAddress must be an http or https URL such as http://prometheus.monitoring:9090')
    .optional(),
  metrics: list(analysisMetricSchema, 10)
    .refine((m) => m.length >= 1, 'should have at least 1 items')
    .superRefine(uniqueBy('name')),
});

const healthGatesSchema = z.object({
  minReadyReplicas: int(1, 100).default(1),
  maxRestarts: int(0).default(3),
  interval: duration('healthGates.interval must be a duration of at least 1s such as 10s or 1m (units ms, s, m, h)', 1000).default('10s'),
  failureThreshold: int(1).default(3),
  initialDelay: duration('healthGates.initialDelay must be a duration such as 0s, 30s or 2m (units ms, s, m, h)', null).default('60s'),
});

/** A canary's version: a label value (it labels the canary's pods), never 'stable'. */
export const canaryVersionSchema = str(63)
  .refine(
    (s) => LABEL_VALUE.test(s),
    "canaryVersion must be a valid label value: at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
  )
  .refine((s) => s !== STABLE_VERSION, "canaryVersion must not be 'stable': that value labels the stable pods");

/** A canary's image. */
export const canaryImageSchema = str(512)
  .refine((s) => s.length > 0 && !WHITESPACE.test(s), 'canary image must be a non-empty image reference without whitespace')
  .refine(digestOk, 'canary image digest must be sha256: and 64 lowercase hex digits (or sha512: and 128)');

const windowSchema = (field: string) => z.object({
  duration: duration(`${field}.duration must be a duration of at least 1s such as 30s or 5m (units ms, s, m, h)`, 1000),
});

/** A blue-green rollout: the new version in full beside the old, all traffic switched at once. */
const blueGreenSchema = z.object({
  autoPromotionSeconds: int(0, 604800).optional(),
  scaleDownDelaySeconds: int(0, 86400).default(30),
  previewReplicas: int(1, 100).optional(),
  prePromotionAnalysis: windowSchema('blueGreen.prePromotionAnalysis').optional(),
  postPromotionAnalysis: windowSchema('blueGreen.postPromotionAnalysis').optional(),
});

const canarySchema = z
  .object({
    enabled: bool().default(false),
    strategy: oneOf(STRATEGIES).default('canary'),
    blueGreen: blueGreenSchema.optional(),
    canaryVersion: canaryVersionSchema.optional(),
    image: canaryImageSchema.optional(),
    weight: weight('weight').default(0),
    replicas: int(1, 100).default(1),
    steps: list(rolloutStepSchema, 50).optional(),
    checks: list(checkSchema, 20).superRefine(uniqueBy('name')).optional(),
    healthGates: healthGatesSchema.prefault({}),
    analysis: analysisSchema.optional(),
    progressDeadline: duration('progressDeadline must be a duration of at least 1s such as 10m or 1h (units ms, s, m, h)', 1000).default('30m'),
    drainSeconds: int(0, 600).default(DEFAULT_DRAIN_SECONDS),
  })
  .superRefine((c, ctx) => {
    if (c.enabled && c.canaryVersion === undefined) {
      ctx.addIssue({ code: 'custom', path: ['canaryVersion'], message: 'canaryVersion is required when canary is enabled' });
    }
    if (c.healthGates.minReadyReplicas > c.replicas) {
      ctx.addIssue({ code: 'custom', path: ['healthGates', 'minReadyReplicas'], message: 'healthGates.minReadyReplicas must not exceed the canary replicas' });
    }
    if (c.strategy === 'blueGreen' && c.steps !== undefined) {
      ctx.addIssue({ code: 'custom', path: ['steps'], message: 'a blueGreen rollout takes no steps: its phases are set in blueGreen' });
    }
    if (c.strategy !== 'blueGreen' && c.blueGreen !== undefined) {
      ctx.addIssue({ code: 'custom', path: ['blueGreen'], message: 'blueGreen is only for strategy: blueGreen' });
    }
    if ((c.blueGreen?.prePromotionAnalysis || c.blueGreen?.postPromotionAnalysis) && !c.analysis) {
      ctx.addIssue({ code: 'custom', path: ['blueGreen'], message: 'prePromotionAnalysis and postPromotionAnalysis run canary.analysis: set its metrics' });
    }
    const checks = new Set((c.checks ?? []).map((check) => check.name));
    if (c.steps?.some((step) => step.check !== undefined && !checks.has(step.check))) {
      ctx.addIssue({ code: 'custom', path: ['steps'], message: "a step's check must name a check listed in checks" });
    }
  });

const serviceMeshSchema = z.object({
  enabled: bool().default(false),
  trafficPolicy: trafficPolicySchema.prefault({}),
  canary: canarySchema.optional(),
});

const HOSTNAME = /^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

const trafficSchema = z
  .object({
    router: oneOf(ROUTERS).optional(),
    gatewayAPI: z
      .object({
        parentRefs: list(z.object({
          name: str(253).refine((s) => DNS1123_SUBDOMAIN.test(s), "parentRefs[].name must be a DNS subdomain (lowercase letters, digits, '-' and '.')"),
          namespace: str(63).refine((s) => DNS1123_LABEL.test(s), "parentRefs[].namespace must be a DNS label (lowercase letters, digits and '-')").optional(),
          sectionName: str(253).refine((s) => DNS1123_SUBDOMAIN.test(s), "parentRefs[].sectionName must be a DNS subdomain (lowercase letters, digits, '-' and '.')").optional(),
        }), 16).refine((l) => l.length >= 1, 'should have at least 1 items'),
        hostnames: list(str(253).refine((s) => HOSTNAME.test(s), 'hostnames[] must be a lowercase host name such as shop.example.com (or *.example.com), without a port'), 16).optional(),
        path: str(1024).refine((s) => s.startsWith('/'), "traffic.gatewayAPI.path must start with '/'").default('/'),
        implementation: oneOf(['generic', 'traefik']).default('generic'),
      })
      .optional(),
  })
  .superRefine((t, ctx) => {
    if (t.router === 'gatewayAPI' && !t.gatewayAPI) {
      ctx.addIssue({ code: 'custom', path: ['gatewayAPI'], message: 'traffic.gatewayAPI (the Gateway to attach to) is required when traffic.router is gatewayAPI' });
    }
  });

export { NOTIFICATION_EVENTS, type NotificationEvent };
export const NOTIFICATION_FORMATS = ['json', 'slack', 'teams'] as const;
export type NotificationFormat = (typeof NOTIFICATION_FORMATS)[number];

/** Where rollout notifications go: a URL, or one read from a Secret at send time, and the events wanted. */
export const notificationSchema = z
  .object({
    name: checkName('notification name'),
    url: str(2048).refine((s) => HTTP_URL.test(s), 'notification url must be an http or https URL such as https://hooks.example.com/rollouts').optional(),
    urlFrom: z.object({ secretKeyRef: z.object({ name: str(253), key: str(253) }) }).optional(),
    format: oneOf(NOTIFICATION_FORMATS).default('json'),
    events: list(oneOf(NOTIFICATION_EVENTS), 8).optional(),
  })
  .refine((n) => (n.url !== undefined) !== (n.urlFrom !== undefined), 'each notification sets exactly one of url or urlFrom');

const DEFAULT_HEALTH_CHECK = { readinessProbe: { httpGet: { path: '/health', port: 80 }, initialDelaySeconds: 5, periodSeconds: 10 } };

/** The spec of an Application, with the CRD's defaults and rules. */
export const applicationSpecSchema = z
  .object({
    image: str(512)
      .refine((s) => s.length > 0, 'image must not be empty')
      .refine((s) => !WHITESPACE.test(s), 'image must not contain whitespace')
      .refine(digestOk, 'image digest must be sha256: and 64 lowercase hex digits (or sha512: and 128)'),
    replicas: int(1, 100).default(1),
    service: serviceSchema.prefault({}),
    resources: resourcesSchema.optional(),
    env: list(envVarSchema, 200).superRefine(uniqueBy('name')).optional(),
    configMaps: list(configMapMountSchema, 20).superRefine(uniqueBy('mountPath')).optional(),
    storage: storageSchema.optional(),
    healthCheck: healthCheckSchema.prefault(DEFAULT_HEALTH_CHECK),
    autoscaling: autoscalingSchema.optional(),
    traffic: trafficSchema.optional(),
    serviceMesh: serviceMeshSchema.optional(),
    notifications: list(notificationSchema, 10).superRefine(uniqueBy('name')).optional(),
  }, { error: typeError('object') })
  .superRefine((spec, ctx) => {
    const canary = spec.serviceMesh?.canary;
    if (canary?.enabled && canary.strategy === 'canary' && !spec.serviceMesh?.enabled && spec.traffic?.router === undefined) {
      ctx.addIssue({ code: 'custom', path: ['serviceMesh', 'canary', 'enabled'], message: 'a canary needs a router: serviceMesh.enabled (Istio), traffic.router: gatewayAPI, or traffic.router: replicas (no proxy; the share follows replica counts)' });
    }
    if (spec.traffic?.router === 'replicas' && canary?.steps?.some((s) => s.setHeaderRoute !== undefined || s.setMirrorRoute !== undefined)) {
      ctx.addIssue({ code: 'custom', path: ['serviceMesh', 'canary', 'steps'], message: 'traffic.router replicas routes by replica counts only: setHeaderRoute and setMirrorRoute need istio or gatewayAPI' });
    }
    if (spec.traffic?.router === 'istio' && !spec.serviceMesh?.enabled) {
      ctx.addIssue({ code: 'custom', path: ['traffic', 'router'], message: 'traffic.router istio needs serviceMesh.enabled' });
    }
    const router = routerOf(spec);
    const templated = router === 'istio' || (router === 'gatewayAPI' && spec.traffic?.gatewayAPI?.implementation === 'traefik');
    if (!templated && spec.serviceMesh?.canary?.analysis?.metrics.some((m) => m.template !== undefined)) {
      ctx.addIssue({ code: 'custom', path: ['serviceMesh', 'canary', 'analysis', 'metrics'], message: 'the built-in templates read Istio\'s or Traefik\'s metrics: they need Istio, or the Gateway API with traffic.gatewayAPI.implementation traefik (or write a query)' });
    }
    const storage = spec.storage;
    if (storage && spec.configMaps?.some((c) => c.mountPath === storage.mountPath)) {
      ctx.addIssue({ code: 'custom', path: ['storage', 'mountPath'], message: 'storage.mountPath must differ from every configMaps[].mountPath' });
    }
  });

const timestamp = z.union([z.string(), z.date()]).transform((t) => (typeof t === 'string' ? t : t.toISOString()));

const metadataSchema = z.object({
  name: str()
    .refine((s) => s.length <= MAX_NAME_LENGTH, `metadata.name must be at most ${MAX_NAME_LENGTH} characters so that the child name <name>-canary fits in 63`)
    .refine(
      (s) => DNS1035_LABEL.test(s),
      "metadata.name must be a DNS-1035 label: lowercase letters, digits and '-', starting with a letter and ending with a letter or digit",
    ),
  namespace: z.string().optional(),
  uid: z.string().optional(),
  generation: z.int().optional(),
  resourceVersion: z.string().optional(),
  deletionTimestamp: timestamp.optional(),
  finalizers: z.array(z.string()).optional(),
  labels: z.record(z.string(), z.string()).optional(),
  annotations: z.record(z.string(), z.string()).optional(),
});

const conditionSchema = z.object({
  type: z.string(),
  status: z.enum(['True', 'False', 'Unknown']),
  observedGeneration: z.int().optional(),
  lastTransitionTime: timestamp,
  reason: z.string(),
  message: z.string(),
});

const canaryStatusSchema = z.object({
  phase: z.enum(RolloutPhase).optional(),
  step: z.int().optional(),
  totalSteps: z.int().optional(),
  weight: z.int().optional(),
  version: z.string().optional(),
  image: z.string().optional(),
  startedAt: timestamp.optional(),
  pauseEndsAt: timestamp.optional(),
  pausedBy: z.string().optional(),
  abortedBy: z.string().optional(),
  reason: z.string().optional(),
  message: z.string().optional(),
  checks: z.array(z.object({ name: z.string(), phase: z.string(), result: z.enum(['pass', 'fail', 'waiting']), message: z.string(), at: timestamp })).optional(),
  specDigest: z.string().optional(),
});

/**
 * A child as the operator's last apply left it: what a restarted watcher compares its lists against, so a settled
 * Application nobody touched while the operator was away needs no pass (docs/scaling.md, "Restarts").
 */
export const appliedChildSchema = z.object({ kind: z.string(), name: z.string(), generation: z.int().optional() });
export type AppliedChild = z.infer<typeof appliedChildSchema>;

/** The status the operator writes; the API server has already checked it against the CRD. */
export const applicationStatusSchema = z.object({
  observedGeneration: z.int().optional(),
  phase: z.enum(Phase).optional(),
  message: z.string().optional(),
  desiredReplicas: z.int().optional(),
  replicas: z.int().optional(),
  readyReplicas: z.int().optional(),
  availableReplicas: z.int().optional(),
  selector: z.string().optional(),
  conditions: z.array(conditionSchema).optional(),
  lastUpdateTime: timestamp.optional(),
  endpoints: z.array(z.string()).optional(),
  workflowId: z.string().optional(),
  temporalUI: z.string().optional(),
  canary: canaryStatusSchema.optional(),
  children: z.array(appliedChildSchema).optional(),
});

/** A whole Application object. metadata.namespace and metadata.uid are set on every object read from the cluster. */
export const applicationSchema = z.object({
  apiVersion: z.literal(API_VERSION),
  kind: z.literal(KIND),
  metadata: metadataSchema,
  spec: applicationSpecSchema,
  status: applicationStatusSchema.optional(),
}).superRefine((a, ctx) => {
  if (a.spec.serviceMesh?.canary?.strategy === 'blueGreen' && a.metadata.name.length > MAX_BLUE_GREEN_NAME_LENGTH) {
    ctx.addIssue({ code: 'custom', path: ['metadata', 'name'], message: `metadata.name must be at most ${MAX_BLUE_GREEN_NAME_LENGTH} characters for a blue-green rollout, so that its preview Service <name>-preview fits in 63` });
  }
});

export type Application = z.output<typeof applicationSchema>;
export type ApplicationInput = z.input<typeof applicationSchema>;
export type ApplicationSpec = z.output<typeof applicationSpecSchema>;
export type ApplicationSpecInput = z.input<typeof applicationSpecSchema>;
export type ApplicationStatus = z.output<typeof applicationStatusSchema>;
export type CanarySpec = z.output<typeof canarySchema>;
export type BlueGreenSpec = z.output<typeof blueGreenSchema>;
export type TrafficSpec = z.output<typeof trafficSchema>;
export type CanaryStep = z.output<typeof canaryStepSchema>;
export type RolloutStep = z.output<typeof rolloutStepSchema>;
export type Check = z.output<typeof checkSchema>;
export type Notification = z.output<typeof notificationSchema>;
export type HttpCheck = z.output<typeof httpCheckSchema>;
export type JobCheck = z.output<typeof jobCheckSchema>;
export type AnalysisSpec = z.output<typeof analysisSchema>;
export type RouteMatch = z.output<typeof routeMatchSchema>;
export type Probe = z.output<typeof probeSchema>;
export type EnvVar = z.output<typeof envVarSchema>;

export type ParseResult = { ok: true; app: Application } | { ok: false; reason: typeof Reason.InvalidSpec; message: string };

/** Parses and defaults an Application; on failure, a reason and a message listing every problem by field path. */
export function parseApplication(obj: unknown): ParseResult {
  const result = applicationSchema.safeParse(obj);
  if (result.success) return { ok: true, app: result.data };
  return { ok: false, reason: Reason.InvalidSpec, message: issuesMessage(result.error) };
}

/** The router a canary's traffic goes through: spec.traffic.router, else Istio when the mesh is on; none otherwise. */
export function routerOf(spec: Pick<ApplicationSpec, 'traffic' | 'serviceMesh'>): RouterName | undefined {
  return spec.traffic?.router ?? (spec.serviceMesh?.enabled ? 'istio' : undefined);
}

/**
 * The router a rollout of this spec moves traffic with: the one the spec names, or for a blue-green rollout without
 * one, the Service itself (its selector switches); undefined when the spec's rollout cannot run (a canary needs one).
 */
export function rolloutRouterOf(spec: Pick<ApplicationSpec, 'traffic' | 'serviceMesh'>): RolloutRouterName | undefined {
  return routerOf(spec) ?? (spec.serviceMesh?.canary?.strategy === 'blueGreen' ? 'service' : undefined);
}

/**
 * The canary's image: canary.image when set, otherwise spec.image with its tag (and digest)
 * replaced by canaryVersion. Throws when the spec has no canary version to run.
 */
export function canaryImage(spec: ApplicationSpec): string {
  const canary = spec.serviceMesh?.canary;
  if (canary?.image !== undefined) return canary.image;
  if (canary?.canaryVersion === undefined) throw new Error('the canary has neither an image nor a canaryVersion');
  return imageAtVersion(spec.image, canary.canaryVersion);
}
