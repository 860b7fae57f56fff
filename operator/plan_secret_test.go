package operator_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/opzero/opzero/builder"
	v1 "github.com/opzero/opzero/examples/configwatcher/api/v1"
	"github.com/opzero/opzero/internal/plan"
	"github.com/opzero/opzero/operator"
	"github.com/opzero/opzero/testenv"
)

// Values the plan must never print, in any form.
const (
	oldSecretValue     = "old-password-0f3a9c1e77"
	newSecretValue     = "new-password-b81d42e6c5aa"
	createdSecretValue = "created-password-5e6f7a8b9c"
	createdStringValue = "created-token-d4c3b2a1"
)

// secretWriter, for ConfigWatcher "creator", creates the Secret
// creator-creds (data, stringData and kubectl's last-applied annotation,
// which carries them); for "updater", changes the password of the
// Secret updater-creds.
type secretWriter struct{ client.Client }

func (r *secretWriter) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	name := req.Name + "-creds"
	sec := &corev1.Secret{}
	if req.Name == "updater" {
		if err := r.Get(ctx, client.ObjectKey{Namespace: req.Namespace, Name: name}, sec); err != nil {
			return reconcile.Result{}, err
		}
		sec.Data["password"] = []byte(newSecretValue)
		return reconcile.Result{}, r.Update(ctx, sec)
	}
	sec = &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: req.Namespace, Name: name, Annotations: map[string]string{
			"kubectl.kubernetes.io/last-applied-configuration": lastAppliedOf(createdSecretValue)}},
		Data:       map[string][]byte{"password": []byte(createdSecretValue)},
		StringData: map[string]string{"token": createdStringValue},
	}
	return reconcile.Result{}, r.Create(ctx, sec)
}

// TestPlanRedactsSecrets: a planned Secret create and update list the
// Secret's keys (data.password, data.token) with sizes, never a value:
// neither the values nor their base64 are in the JSON report the
// operator wrote, its text or its diff.
func TestPlanRedactsSecrets(t *testing.T) {
	env := testenv.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	createWatchers(t, env, ns, "creator", "updater")
	existing := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "updater-creds"},
		Data: map[string][]byte{"password": []byte(oldSecretValue), "user": []byte("app")}}
	if err := env.Client.Create(ctx, existing); err != nil {
		t.Fatal(err)
	}
	var a audit
	rep := runPlan(t, a.config(env.Config), plan.Request{Namespace: ns, Rounds: 1}, 0, func(rt *operator.Runtime) {
		if err := builder.ControllerManagedBy(rt).Named("secrets").For(&v1.ConfigWatcher{}).Complete(&secretWriter{Client: rt.GetClient()}); err != nil {
			panic(err)
		}
	})

	// The report as the operator wrote it (plan.Read does not redact),
	// then every printed form.
	file, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var js, text, diff bytes.Buffer
	if err := rep.Write(&js); err != nil {
		t.Fatal(err)
	}
	if err := plan.PrintText(&text, rep); err != nil {
		t.Fatal(err)
	}
	if err := plan.PrintDiff(&diff, rep); err != nil {
		t.Fatal(err)
	}
	t.Logf("plan:\n%s\n-o diff:\n%s", text.String(), diff.String())
	for form, out := range map[string][]byte{"the operator's report": file, "json": js.Bytes(), "text": text.Bytes(), "diff": diff.Bytes()} {
		for _, v := range []string{oldSecretValue, newSecretValue, createdSecretValue, createdStringValue} {
			for _, enc := range []string{v, base64.StdEncoding.EncodeToString([]byte(v))} {
				if bytes.Contains(out, []byte(enc)) {
					t.Errorf("%s prints a Secret's value %q", form, enc)
				}
			}
		}
	}

	created := objectOf(t, rep, "creator", 1)
	updated := objectOf(t, rep, "updater", 1)
	for _, tc := range []struct {
		o    plan.Object
		verb string
		want map[string]string // path: "before -> after", as -o text prints them
	}{
		{created, "create", map[string]string{
			"data.password": " -> (secret, 27 bytes)", "data.token": " -> (secret, 22 bytes)",
			"metadata.annotations.kubectl.kubernetes.io/last-applied-configuration": fmt.Sprintf(" -> (secret, %d bytes)", len(lastAppliedOf(createdSecretValue)))}},
		{updated, "update", map[string]string{"data.password": "(secret, 23 bytes) -> (secret, 25 bytes, changed)"}},
	} {
		if tc.o.Error != "" || len(tc.o.Writes) != 1 || tc.o.Writes[0].Verb != tc.verb || tc.o.Writes[0].Kind != "Secret" {
			t.Errorf("%s: error %q, writes %+v; want one %s of a Secret", tc.o.Ref, tc.o.Error, tc.o.Writes, tc.verb)
			continue
		}
		got := map[string]string{}
		for _, c := range tc.o.Writes[0].Changes {
			if _, ok := tc.want[c.Path]; !ok {
				continue
			}
			if !c.Secret {
				t.Errorf("%s: %s not marked secret", tc.o.Ref, c.Path)
			}
			got[c.Path] = unquote(c.Before) + " -> " + unquote(c.After)
		}
		for p, w := range tc.want {
			if got[p] != w {
				t.Errorf("%s: %s %s: %q, want %q", tc.o.Ref, tc.verb, p, got[p], w)
			}
		}
		if len(tc.o.Writes[0].Changes) > 0 && tc.verb == "update" && len(tc.o.Writes[0].Changes) != 1 {
			t.Errorf("%s: update changes %+v, want data.password only (data.user is unchanged)", tc.o.Ref, tc.o.Writes[0].Changes)
		}
	}
	if !strings.Contains(text.String(), "~ data.password: (secret, 23 bytes) -> (secret, 25 bytes, changed)") {
		t.Errorf("-o text does not say the password changes, by its size")
	}
	if !strings.Contains(diff.String(), "+data.token: (secret, 22 bytes)") {
		t.Errorf("-o diff does not list the created Secret's key data.token")
	}
	a.check(t)
}

func lastAppliedOf(password string) string {
	return `{"data":{"password":"` + base64.StdEncoding.EncodeToString([]byte(password)) + `"}}`
}

func unquote(raw []byte) string {
	if raw == nil {
		return ""
	}
	return strings.Trim(string(raw), `"`)
}
