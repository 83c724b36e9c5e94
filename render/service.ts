import type { V1Service } from '@kubernetes/client-node';
import type { Application } from '../api/application.ts';
import { LABEL_NAME, childName } from '../api/constants.ts';
import { childMetadata, compact } from './meta.ts';

/** The Service `<app>`: spec type and ports, selecting the pods of every version (Istio splits the traffic). */
export function renderService(app: Application): V1Service {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: childMetadata(app, childName(app)),
    spec: {
      type: app.spec.service.type,
      selector: { [LABEL_NAME]: app.metadata.name },
      ports: app.spec.service.ports.map((p) => compact({ name: p.name, port: p.port, targetPort: p.port, protocol: 'TCP' })),
    },
  };
}
