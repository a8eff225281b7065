package routeset

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
)

// ErrNoKey is returned when run-time route secrets are needed and
// secrets.key is not set.
var ErrNoKey = errors.New("secrets.key is not set (HOOKRELAY_SECRETS_KEY; make one with `hookrelay secret key`): routes made at run time need it")

// ErrUnknownKey is returned for a secret sealed with a key that is
// neither secrets.key nor one of secrets.previous_keys.
var ErrUnknownKey = errors.New("neither secrets.key nor one of secrets.previous_keys")

// KeyMissing reports whether err says the keyring lacks the key a seal
// needs (ErrNoKey, ErrUnknownKey): a matter of this process's settings,
// which it keeps for its life, not of the sealed data.
func KeyMissing(err error) bool { return errors.Is(err, ErrNoKey) || errors.Is(err, ErrUnknownKey) }

// Keyring seals route signing secrets with AES-256-GCM: a sealed secret is
// the key's id (8 bytes of the key's SHA-256), a random 12-byte nonce and
// the ciphertext, with the route's name as additional data (a sealed
// secret copied onto another route does not open). New secrets are sealed
// with the current key; the previous keys only open.
type Keyring struct {
	current *sealKey
	all     map[string]*sealKey
}

type sealKey struct {
	id   []byte
	aead cipher.AEAD
}

const keyIDLen = 8

// NewKeyring returns the keyring of current and previous (standard base64
// of 32 bytes each). With current empty, it opens nothing and seals
// nothing: every call fails with ErrNoKey.
func NewKeyring(current string, previous []string) (*Keyring, error) {
	k := &Keyring{all: map[string]*sealKey{}}
	if current == "" {
		return k, nil
	}
	for i, s := range append([]string{current}, previous...) {
		sk, err := newSealKey(s)
		if err != nil {
			if i == 0 {
				return nil, fmt.Errorf("secrets.key: %w", err)
			}
			return nil, fmt.Errorf("secrets.previous_keys[%d]: %w", i-1, err)
		}
		if i == 0 {
			k.current = sk
		}
		k.all[string(sk.id)] = sk
	}
	return k, nil
}

func newSealKey(s string) (*sealKey, error) {
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(raw) != 32 {
		return nil, errors.New("must be standard base64 of 32 bytes")
	}
	block, err := aes.NewCipher(raw)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(raw)
	return &sealKey{id: sum[:keyIDLen], aead: aead}, nil
}

// Usable reports whether the keyring has a current key.
func (k *Keyring) Usable() bool { return k != nil && k.current != nil }

// Seal seals secret for route with the current key.
func (k *Keyring) Seal(route string, secret []byte) ([]byte, error) {
	if !k.Usable() {
		return nil, ErrNoKey
	}
	nonce := make([]byte, k.current.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("reading random bytes: %w", err)
	}
	out := append(append([]byte{}, k.current.id...), nonce...)
	return k.current.aead.Seal(out, nonce, secret, []byte(route)), nil
}

// Open opens route's sealed secret with the key it names.
func (k *Keyring) Open(route string, sealed []byte) ([]byte, error) {
	if !k.Usable() {
		return nil, ErrNoKey
	}
	if len(sealed) < keyIDLen {
		return nil, errors.New("sealed secret is truncated")
	}
	sk := k.all[string(sealed[:keyIDLen])]
	if sk == nil {
		return nil, fmt.Errorf("sealed with key %s, which is %w", hex.EncodeToString(sealed[:keyIDLen]), ErrUnknownKey)
	}
	rest := sealed[keyIDLen:]
	n := sk.aead.NonceSize()
	if len(rest) < n {
		return nil, errors.New("sealed secret is truncated")
	}
	secret, err := sk.aead.Open(nil, rest[:n], rest[n:], []byte(route))
	if err != nil {
		return nil, errors.New("sealed secret does not open: altered, or sealed for another route")
	}
	return secret, nil
}

// Reseal opens route's sealed secret and seals it with the current key;
// one sealed with it already is returned as it is.
func (k *Keyring) Reseal(route string, sealed []byte) ([]byte, error) {
	if k.Usable() && len(sealed) >= keyIDLen && string(sealed[:keyIDLen]) == string(k.current.id) {
		return sealed, nil
	}
	secret, err := k.Open(route, sealed)
	if err != nil {
		return nil, err
	}
	return k.Seal(route, secret)
}

// NewSecret returns a new signing secret: 32 random bytes, as
// "whsec_<base64>" and raw.
func NewSecret() (whsec string, raw []byte, err error) {
	raw = make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", nil, fmt.Errorf("reading random bytes: %w", err)
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(raw), raw, nil
}

// Fingerprint names a signing secret without revealing it: the first 8
// bytes of its SHA-256, in hex.
func Fingerprint(raw []byte) string {
	sum := sha256.Sum256(raw)
	return "sha256:" + hex.EncodeToString(sum[:8])
}
