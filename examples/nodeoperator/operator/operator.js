// greeting-operator: a Kubernetes operator in Node.js on @dot-i/k8s-operator.
// A Greeting (greetings.hello.example.com/v1) gets a ConfigMap
// <name>-greeting holding "Hello, <spec.to>!", owned by it, and a status
// (observedGeneration, configMap). Level-triggered: its watches start with
// every object that exists (ADDED), so on start it reconciles them all; a
// ConfigMap it owns that is edited or deleted is put back; a Greeting
// deleted has its finalizer run (the ConfigMap deleted) and removed.
'use strict';
const k8s = require('@kubernetes/client-node');
const { default: Operator, ResourceEventType } = require('@dot-i/k8s-operator');

const GROUP = 'hello.example.com';
const VERSION = 'v1';
const PLURAL = 'greetings';
const FINALIZER = 'greetings.hello.example.com/configmap';

const log = (level) => (msg) => console.log(`${new Date().toISOString()} ${level} ${msg}`);
const logger = { debug: () => {}, info: log('info'), warn: log('warn'), error: log('error') };

class GreetingOperator extends Operator {
  constructor() {
    super(logger);
    this.custom = this.kubeConfig.makeApiClient(k8s.CustomObjectsApi);
  }

  async init() {
    await this.watchResource(GROUP, VERSION, PLURAL, (e) => this.onGreeting(e));
    await this.watchResource('', 'v1', 'configmaps', (e) => this.onConfigMap(e));
  }

  async onGreeting(e) {
    if (e.type === ResourceEventType.Deleted) return;
    const done = await this.handleResourceFinalizer(e, FINALIZER, (ev) => this.deleteConfigMap(ev.object));
    if (!done) await this.reconcile(e.object);
  }

  // A change to a ConfigMap a Greeting owns reconciles that Greeting.
  async onConfigMap(e) {
    const owner = (e.object.metadata.ownerReferences || []).find((r) => r.controller && r.kind === 'Greeting');
    if (!owner) return;
    const ns = e.object.metadata.namespace;
    try {
      const { body } = await this.custom.getNamespacedCustomObject(GROUP, VERSION, ns, PLURAL, owner.name);
      if (!body.metadata.deletionTimestamp) await this.reconcile(body);
    } catch (err) {
      if (status(err) !== 404) logger.error(`greeting ${ns}/${owner.name}: ${err}`);
    }
  }

  async reconcile(g) {
    const { name, namespace, uid, generation } = g.metadata;
    const cmName = `${name}-greeting`;
    const data = { greeting: `Hello, ${(g.spec && g.spec.to) || 'world'}!` };
    const desired = {
      metadata: {
        name: cmName, namespace,
        labels: { 'app.kubernetes.io/managed-by': 'greeting-operator' },
        ownerReferences: [{ apiVersion: g.apiVersion, kind: 'Greeting', name, uid, controller: true, blockOwnerDeletion: true }],
      },
      data,
    };
    try {
      const { body: cm } = await this.k8sApi.readNamespacedConfigMap(cmName, namespace);
      if (JSON.stringify(cm.data || {}) !== JSON.stringify(data)) {
        desired.metadata.resourceVersion = cm.metadata.resourceVersion;
        await this.k8sApi.replaceNamespacedConfigMap(cmName, namespace, desired);
        logger.info(`greeting ${namespace}/${name}: configmap ${cmName} updated`);
      }
    } catch (err) {
      if (status(err) !== 404) throw err;
      await this.k8sApi.createNamespacedConfigMap(namespace, desired);
      logger.info(`greeting ${namespace}/${name}: configmap ${cmName} created`);
    }
    const st = g.status || {};
    if (st.observedGeneration !== generation || st.configMap !== cmName || st.greeting !== data.greeting) {
      const meta = { id: `${PLURAL}.${GROUP}/${VERSION}`, name, namespace, apiVersion: g.apiVersion, kind: 'Greeting', resourceVersion: g.metadata.resourceVersion };
      await this.patchResourceStatus(meta, { observedGeneration: generation, configMap: cmName, greeting: data.greeting });
      logger.info(`greeting ${namespace}/${name}: reconciled (generation ${generation})`);
    }
  }

  async deleteConfigMap(g) {
    const { name, namespace } = g.metadata;
    try {
      await this.k8sApi.deleteNamespacedConfigMap(`${name}-greeting`, namespace);
    } catch (err) {
      if (status(err) !== 404) throw err;
    }
    logger.info(`greeting ${namespace}/${name}: deleted, its configmap with it`);
  }
}

function status(err) {
  return (err && (err.statusCode || (err.response && err.response.statusCode))) || 0;
}

const operator = new GreetingOperator();
for (const sig of ['SIGTERM', 'SIGINT']) {
  process.on(sig, () => {
    logger.info(`${sig}: stopping`);
    operator.stop();
    process.exit(0);
  });
}
operator.start().then(() => logger.info('started'), (err) => {
  logger.error(`start: ${err}`);
  process.exit(1);
});
