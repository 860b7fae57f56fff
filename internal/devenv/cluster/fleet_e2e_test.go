package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/opzero/opzero/internal/manifests"
)

// fleet is a cluster's fleet of operators of different shapes, installed
// side by side: six releases of the kubebuilder project built unchanged
// (memcached: its Memcacheds and the Deployments it owns cached), three of
// the repo's ConfigWatcher rebuilt with opzero and run classic (ConfigMaps,
// Pods and ConfigWatchers of every namespace cached) and greeting-operator
// (Node.js, unchanged). Classic first, each as released: the fleet's
// always-on working set. Then each served at zero by one hub (its serving
// replica and its standby), adopted one by one: the hub's working set
// serving the first alone and serving all ten, beside the fleet's classic
// figure, and what each more operator added.
func (e *e2e) fleet(t *testing.T) {
	const memcacheds, configWatchers = 6, 3
	dir, ref := e.memcachedUnchanged(t)
	e.installHub(t)
	var rels []release
	var adoptArgs [][]string
	for i := range memcacheds {
		ns := e.namespace(t, fmt.Sprintf("e2e-fleet-mc%d", i))
		rels = append(rels, e.memcachedRelease(t, dir, ns, fmt.Sprintf("fl%d-%s-", i, e.run), ref))
		adoptArgs = append(adoptArgs, []string{"--owner", "Deployment=Memcached", "--watch-namespace", ns, "--idle-after", "5s"})
	}
	for i := range configWatchers {
		rels = append(rels, e.configWatcherClassic(t, e.namespace(t, fmt.Sprintf("e2e-fleet-cw%d", i))))
		adoptArgs = append(adoptArgs, []string{"--idle-after", "5s"})
	}
	node := e.nodeRelease(t, e.namespace(t, "e2e-fleet-node"))
	rels = append(rels, node)
	adoptArgs = append(adoptArgs, []string{"--owner", "ConfigMap=Greeting", "--watch-namespace", node.ns, "--idle-after", "5s"})
	shapes := fmt.Sprintf("%d kubebuilder managers built unchanged, %d ConfigWatchers built with opzero run classic, 1 Node.js operator unchanged", memcacheds, configWatchers)

	want := map[string][]string{}
	for _, r := range rels {
		e.waitAvailable(t, r.ns, r.deployment)
		want[r.ns] = []string{r.deployment}
	}
	settled(30 * time.Second)
	classic := e.memory(t, want)
	if len(classic) != len(rels) {
		t.Fatalf("kubelet's summary has %d of the fleet's %d pods", len(classic), len(rels))
	}
	e.logFleet(t, fmt.Sprintf("a fleet of %d, classic (%s; 1 replica each, as released)", len(rels), shapes), classic)

	hub := map[string][]string{manifests.HubNamespace: {manifests.HubName}}
	atZero := func(rs []release) {
		for _, r := range rs {
			e.ready(t, r.ns, gvrSubscription, 1)
			e.deploymentAtZero(t, r.ns, r.deployment)
		}
		settled(30 * time.Second)
	}
	e.adopt(t, rels[0], false, adoptArgs[0]...)
	atZero(rels[:1])
	first := e.memory(t, hub)
	e.logFleet(t, "the hub serving the fleet's first operator at zero (the other nine classic)", first)
	for i := 1; i < len(rels); i++ {
		e.adopt(t, rels[i], false, adoptArgs[i]...)
	}
	atZero(rels[1:])
	hubPods := e.memory(t, hub)
	left := e.memory(t, want)
	if len(left) != 0 {
		t.Errorf("at zero, kubelet still has %d of the fleet's pods", len(left))
	}
	e.logFleet(t, fmt.Sprintf("the same %d at zero: the hub serving them (%d pods of the fleet left)", len(rels), len(left)), append(hubPods, left...))
	all := sumWS(hubPods) + sumWS(left)
	e.figure(t, "real node, working set: a fleet of %d of different shapes (%s) at zero on the hub (serving + standby) vs classic: %.3fx (%.1f MiB vs %.1f MiB; goal <= 0.1x)",
		len(rels), shapes, float64(all)/float64(sumWS(classic)), mib(all), mib(sumWS(classic)))
	e.figure(t, "real node, working set: the hub serving 1 of the fleet %.1f MiB, all %d %.1f MiB: %+.2f MiB for each more operator (goal <= 1 MiB)",
		mib(sumWS(first)), len(rels), mib(sumWS(hubPods)), (mib(sumWS(hubPods))-mib(sumWS(first)))/float64(len(rels)-1))
}
