# syntax=docker/dockerfile:1
# The operator's container image. Node 24 runs the TypeScript sources as they are; the workflow code is bundled once
# here, so a starting worker loads it from WORKFLOW_BUNDLE_PATH instead of running webpack.
#   docker build -t application-operator:latest .
ARG NODE_IMAGE=node:24-slim

FROM ${NODE_IMAGE} AS build
WORKDIR /app
ENV npm_config_fund=false npm_config_audit=false npm_config_update_notifier=false
COPY package.json package-lock.json ./
RUN npm ci
COPY . .
RUN node scripts/bundle-workflows.ts dist/workflow-bundle.js \
 && npm prune --omit=dev \
 && rm -rf scripts

FROM ${NODE_IMAGE}
LABEL org.opencontainers.image.title="application-operator" \
      org.opencontainers.image.description="Kubernetes operator for Application resources, reconciled by Temporal workflows" \
      org.opencontainers.image.licenses="Apache-2.0"
WORKDIR /app
# NODE_OPTIONS and MALLOC_ARENA_MAX: the memory settings of operator/runtime.ts (about half the peak RSS); node's
# --import of its PRELOAD in the ENTRYPOINT: calls into workflow code without a watchdog thread each.
ENV NODE_ENV=production \
    HOME=/tmp \
    NODE_OPTIONS=--max-semi-space-size=2 \
    MALLOC_ARENA_MAX=2 \
    WORKFLOW_BUNDLE_PATH=/app/dist/workflow-bundle.js \
    METRICS_ADDR=0.0.0.0:9464
# Owned by root and not writable by the runtime user: the root filesystem can be mounted read-only.
COPY --from=build /app /app
USER 65532:65532
EXPOSE 9464
ENTRYPOINT ["node", "--import=./operator/sandbox-calls.ts", "bin/application-operator.ts", "run"]
