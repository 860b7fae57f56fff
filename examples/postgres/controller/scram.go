package controller

import (
	"crypto/hmac"
	"crypto/md5"
	"crypto/pbkdf2"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"strings"
)

// passwordMatches tells whether the verifier PostgreSQL stores for role
// (pg_authid.rolpassword: SCRAM-SHA-256 or the older md5) is the one of
// password, so the operator sets a password only when it differs and
// never needs to read one back.
func passwordMatches(stored, role, password string) bool {
	if strings.HasPrefix(stored, "md5") {
		sum := md5.Sum([]byte(password + role))
		return hmac.Equal([]byte(stored), []byte("md5"+hex.EncodeToString(sum[:])))
	}
	// SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>
	rest, ok := strings.CutPrefix(stored, "SCRAM-SHA-256$")
	if !ok {
		return false
	}
	params, keys, ok := strings.Cut(rest, "$")
	if !ok {
		return false
	}
	iterS, saltS, ok1 := strings.Cut(params, ":")
	storedKeyS, _, ok2 := strings.Cut(keys, ":")
	iter, err := strconv.Atoi(iterS)
	if !ok1 || !ok2 || err != nil || iter <= 0 {
		return false
	}
	salt, err1 := base64.StdEncoding.DecodeString(saltS)
	storedKey, err2 := base64.StdEncoding.DecodeString(storedKeyS)
	if err1 != nil || err2 != nil {
		return false
	}
	salted, err := pbkdf2.Key(sha256.New, password, salt, iter, sha256.Size)
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, salted)
	mac.Write([]byte("Client Key"))
	sum := sha256.Sum256(mac.Sum(nil))
	return hmac.Equal(sum[:], storedKey)
}
