package dev

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
)

// tokenLifetime of the service-account tokens processes run with.
const tokenLifetime = 24 * 60 * 60

// kubeconfigFor returns the kubeconfig a process of the pod template at
// path in u runs with: a TokenRequest token of its serviceAccountName (as a
// kubelet would mount), so the manifests' RBAC is what the process gets.
// Without a serviceAccountName (a hand-written manifest) it is the
// platform's own kubeconfig.
func (p *Platform) kubeconfigFor(ctx context.Context, u *unstructured.Unstructured, path ...string) (string, string, error) {
	sa, _, _ := unstructured.NestedString(u.Object, append(path, "serviceAccountName")...)
	if sa == "" {
		return p.kubeconfig, "the platform's kubeconfig (no serviceAccountName)", nil
	}
	ns := u.GetNamespace()
	exp := int64(tokenLifetime)
	tr, err := p.cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		return "", "", fmt.Errorf("%s %s: a token for its service account %s: %w", u.GetKind(), key(u), sa, err)
	}
	cfg, err := clientcmd.LoadFromFile(p.kubeconfig)
	if err != nil {
		return "", "", err
	}
	for _, ai := range cfg.AuthInfos {
		*ai = *ai.DeepCopy()
		ai.Token, ai.TokenFile, ai.ClientCertificate, ai.ClientCertificateData, ai.ClientKey, ai.ClientKeyData = tr.Status.Token, "", "", nil, "", nil
		ai.Username, ai.Password, ai.Exec, ai.AuthProvider, ai.Impersonate = "", "", nil, nil, ""
	}
	file := filepath.Join(p.opts.Dir, "kubeconfig-"+ns+"-"+sa)
	if err := clientcmd.WriteToFile(*cfg, file); err != nil {
		return "", "", err
	}
	if err := os.Chmod(file, 0o600); err != nil {
		return "", "", err
	}
	return file, "service account " + ns + "/" + sa, nil
}
