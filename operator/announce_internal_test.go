package operator

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opzero/opzero/internal/hub/starting"
)

// TestAnnounceTo: the announcement reaches the hub's endpoint with the
// mounted token; without a token, an address or a hub that takes it, it
// says why.
func TestAnnounceTo(t *testing.T) {
	var got []starting.Announcement
	var auth []string
	answer := http.StatusNoContent
	hub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != starting.AnnouncePath || r.Method != http.MethodPost {
			t.Errorf("%s %s, want POST %s", r.Method, r.URL.Path, starting.AnnouncePath)
		}
		var an starting.Announcement
		if err := json.NewDecoder(r.Body).Decode(&an); err != nil {
			t.Error(err)
		}
		got, auth = append(got, an), append(auth, r.Header.Get("Authorization"))
		w.WriteHeader(answer)
		if answer != http.StatusNoContent {
			w.Write([]byte("service account x may not announce"))
		}
	}))
	defer hub.Close()
	peers := strings.TrimPrefix(hub.URL, "http://")
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("the-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	an := starting.Announcement{Service: "configwatcher", Address: "10.244.0.30:8080"}
	ctx := context.Background()
	n, err := announceTo(ctx, peers, tok, an)
	if err != nil || n != 1 {
		t.Fatalf("announceTo: %d, %v; want 1 replica", n, err)
	}
	if len(got) != 1 || got[0] != an || auth[0] != "Bearer the-token" {
		t.Errorf("the hub got %+v with %q, want %+v with the token", got, auth, an)
	}

	answer = http.StatusForbidden
	if _, err := announceTo(ctx, peers, tok, an); err == nil || !strings.Contains(err.Error(), "403 service account x may not announce") {
		t.Errorf("a refusal: %v, want the hub's answer", err)
	}
	if _, err := announceTo(ctx, peers, filepath.Join(t.TempDir(), "none"), an); err == nil || !strings.Contains(err.Error(), "no token") {
		t.Errorf("no token file: %v", err)
	}
	if _, err := announceTo(ctx, peers, tok, starting.Announcement{Service: "configwatcher"}); err == nil || !strings.Contains(err.Error(), "no address") {
		t.Errorf("no address: %v", err)
	}
	if _, err := announceTo(ctx, "no-port", tok, an); err == nil || !strings.Contains(err.Error(), HubPeersEnv) {
		t.Errorf("a bad %s: %v", HubPeersEnv, err)
	}
	if len(got) != 2 {
		t.Errorf("the hub was called %d times, want 2 (the refused one included)", len(got))
	}
}
