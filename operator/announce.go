package operator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/opzero/opzero/internal/hub/starting"
)

// HubPeersEnv names the hub replicas' announcement endpoint, host:port of
// a headless Service (opzero manifests sets it in the hub wiring).
const HubPeersEnv = "OPZERO_HUB_PEERS"

// announceTimeout bounds the announcement: it is of use only in the
// second before Knative finds the pod ready.
const announceTimeout = 2 * time.Second

// announce tells every hub replica, as soon as this instance listens, that
// a pod of its Knative Service ($K_SERVICE) listens at its advertise
// address: the hub then delivers what waits for this operator directly,
// before Knative finds the pod ready (package starting). It is
// authenticated by the token of the operator's service account for the
// hub's audience that the Knative Service mounts (starting.TokenFile).
// Without the variable, the token or an address, it does nothing; a hub
// that cannot be told delivers through Knative as before.
func (r *Runtime) announce(ctx context.Context) {
	peers, svc := os.Getenv(HubPeersEnv), os.Getenv("K_SERVICE")
	if peers == "" || svc == "" {
		return
	}
	addr := strings.TrimPrefix(r.advertiseAddress(), "http://")
	ctx, cancel := context.WithTimeout(ctx, announceTimeout)
	defer cancel()
	t0 := time.Now()
	n, err := announceTo(ctx, peers, starting.TokenFile, starting.Announcement{Service: svc, Address: addr})
	if err != nil {
		r.opts.Logger.V(1).Info("not announced to the hub; its events come through Knative", "reason", err.Error())
		return
	}
	r.opts.Logger.Info("announced to the hub", "replicas", n, "address", addr, "took", time.Since(t0).String())
}

// announceTo POSTs an to every address peers' host resolves to; it
// returns how many took it.
func announceTo(ctx context.Context, peers, tokenFile string, an starting.Announcement) (int, error) {
	if an.Address == "" {
		return 0, fmt.Errorf("no address to announce (not in a pod, or TLS)")
	}
	tok, err := os.ReadFile(tokenFile)
	if err != nil {
		return 0, fmt.Errorf("no token for the hub: %w", err)
	}
	host, port, err := net.SplitHostPort(peers)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: want host:port", HubPeersEnv, peers)
	}
	ips, err := net.DefaultResolver.LookupHost(ctx, host)
	if err != nil {
		return 0, err
	}
	body, _ := json.Marshal(an)
	var wg sync.WaitGroup
	var mu sync.Mutex
	took, errs := 0, []string{}
	for _, ip := range ips {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := postAnnouncement(ctx, "http://"+net.JoinHostPort(ip, port)+starting.AnnouncePath, strings.TrimSpace(string(tok)), body)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err.Error())
				return
			}
			took++
		}()
	}
	wg.Wait()
	if took == 0 {
		return 0, fmt.Errorf("no hub replica took it: %s", strings.Join(errs, "; "))
	}
	return took, nil
}

func postAnnouncement(ctx context.Context, url, token string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		var b [256]byte
		n, _ := resp.Body.Read(b[:])
		return fmt.Errorf("%s answered %d %s", url, resp.StatusCode, strings.TrimSpace(string(b[:n])))
	}
	return nil
}
