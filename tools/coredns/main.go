// Command coredns is CoreDNS with only the plugins a one-node opzero cluster
// uses: the kubernetes plugin answers cluster.local, and there is no
// forwarder, so every other name is refused (the machine reaches no outside
// resolver).
package main

import (
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"

	"github.com/coredns/coredns/coremain"
)

func main() { coremain.Run() }
