package controlplane

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
)

// writeServiceAccountKeys writes the RSA key pair kube-apiserver signs
// service-account tokens with (and kube-controller-manager's token controller
// uses) into dir as sa.key and sa.pub.
func writeServiceAccountKeys(dir string) (keyFile, pubFile string, err error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return "", "", fmt.Errorf("generating the service-account signing key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return "", "", fmt.Errorf("encoding the service-account public key: %w", err)
	}
	keyFile, pubFile = filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub")
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return "", "", err
	}
	return keyFile, pubFile, os.WriteFile(pubFile, pubPEM, 0o644)
}

// randomToken returns a 32-byte random bearer token, hex encoded.
func randomToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generating a token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// writeTokenFile writes kube-apiserver's static token file: the admin (in
// system:masters) and kube-controller-manager, also in system:masters
// because it runs every controller under its own identity.
func writeTokenFile(dir, adminToken, kcmToken string) (string, error) {
	f := filepath.Join(dir, "tokens.csv")
	csv := fmt.Sprintf("%s,opzero-admin,opzero-admin,system:masters\n%s,system:kube-controller-manager,kcm,system:masters\n", adminToken, kcmToken)
	return f, os.WriteFile(f, []byte(csv), 0o600)
}
