// Package auth identifies the user of a sync API request.
//
// Two modes, chosen by --auth-mode (env SYNCHRO_AUTH_MODE), are mutually exclusive:
//
//   - "jwt": the request carries "Authorization: Bearer <token>". The token is
//     verified with an HS256 secret (--jwt-hs256-secret) or with a PEM public key
//     (--jwt-public-key-file: RSA for RS256, EC P-256 for ES256), never both. Only
//     the one algorithm that matches the configured key is accepted. The token must
//     carry "exp"; "exp" and "nbf" are checked with a leeway of [Leeway]. The user id
//     is the string claim named by --jwt-user-claim (default "sub").
//   - "trusted-header": a product API in front of Synchro has authenticated the
//     request and passes the user id in a header (--trusted-user-header). It can
//     also be required to send a shared secret in another header
//     (--trusted-secret-header, --trusted-secret), compared in constant time.
//
// Every error [Authenticator.User] returns matches [ErrUnauthenticated] and has a
// short message that is safe to send to the client: it never contains the token,
// a secret, the user id, or a parser's description of the token's contents.
package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/golang-jwt/jwt/v5"
)

// Modes.
const (
	ModeJWT           = "jwt"
	ModeTrustedHeader = "trusted-header"
)

const (
	// Leeway is the clock skew tolerated when checking "exp" and "nbf".
	Leeway = 30 * time.Second
	// MaxUserIDLen is the longest user id accepted, in bytes.
	MaxUserIDLen = 256
	// MinHS256SecretLen is the shortest HS256 secret accepted, in bytes.
	MinHS256SecretLen = 32
	// MinTrustedSecretLen is the shortest trusted-header shared secret accepted, in bytes.
	MinTrustedSecretLen = 16
	// DefaultUserClaim is the claim that holds the user id unless configured otherwise.
	DefaultUserClaim = "sub"

	maxTokenLen = 8 << 10
)

// Config selects and configures the authentication mode. The zero Mode means
// authentication is not configured: every request is refused.
type Config struct {
	Mode          string // "jwt" or "trusted-header"
	HS256Secret   string // jwt: HS256 secret, used as-is (its bytes)
	PublicKeyFile string // jwt: PEM public key file (RSA -> RS256, EC P-256 -> ES256)
	UserClaim     string // jwt: claim holding the user id ("" means "sub")
	TrustedHeader string // trusted-header: header holding the user id
	SecretHeader  string // trusted-header: header holding the shared secret (optional)
	Secret        string // trusted-header: the shared secret (with SecretHeader)
}

// Register defines the auth flags on fs.
func (c *Config) Register(fs *flag.FlagSet) {
	fs.StringVar(&c.Mode, "auth-mode", "", `authentication mode: "jwt" or "trusted-header" (env SYNCHRO_AUTH_MODE)`)
	fs.StringVar(&c.HS256Secret, "jwt-hs256-secret", "", "jwt: HS256 secret, at least 32 bytes; prefer the env var (env SYNCHRO_JWT_HS256_SECRET)")
	fs.StringVar(&c.PublicKeyFile, "jwt-public-key-file", "", "jwt: PEM public key file, RSA (RS256) or EC P-256 (ES256) (env SYNCHRO_JWT_PUBLIC_KEY_FILE)")
	fs.StringVar(&c.UserClaim, "jwt-user-claim", DefaultUserClaim, "jwt: claim holding the user id (env SYNCHRO_JWT_USER_CLAIM)")
	fs.StringVar(&c.TrustedHeader, "trusted-user-header", "", "trusted-header: header holding the user id, e.g. X-Synchro-User (env SYNCHRO_TRUSTED_USER_HEADER)")
	fs.StringVar(&c.SecretHeader, "trusted-secret-header", "", "trusted-header: header holding the shared secret (env SYNCHRO_TRUSTED_SECRET_HEADER)")
	fs.StringVar(&c.Secret, "trusted-secret", "", "trusted-header: shared secret, at least 16 bytes; prefer the env var (env SYNCHRO_TRUSTED_SECRET)")
}

// String describes c with the secrets redacted, so that logging a Config is safe.
func (c Config) String() string {
	red := func(s string) string {
		if s == "" {
			return ""
		}
		return "REDACTED"
	}
	return fmt.Sprintf("{Mode:%q HS256Secret:%s PublicKeyFile:%q UserClaim:%q TrustedHeader:%q SecretHeader:%q Secret:%s}",
		c.Mode, red(c.HS256Secret), c.PublicKeyFile, c.UserClaim, c.TrustedHeader, c.SecretHeader, red(c.Secret))
}

// GoString is String, so that %#v does not print the secrets either.
func (c Config) GoString() string { return c.String() }

// Authenticator identifies the user of a request.
type Authenticator interface {
	// User returns the request's user id, or an error matching
	// ErrUnauthenticated whose message is safe to show the client.
	User(r *http.Request) (string, error)
}

// ErrUnauthenticated is matched (errors.Is) by every error Authenticator.User returns.
var ErrUnauthenticated = errors.New("unauthenticated")

// authError is a request's authentication failure; its text is safe for clients.
type authError string

func (e authError) Error() string        { return string(e) }
func (e authError) Is(target error) bool { return target == ErrUnauthenticated }

// New validates c and returns the authenticator it describes. Errors name the
// offending flag and environment variable, never a secret's value.
func New(c Config) (Authenticator, error) {
	switch c.Mode {
	case "":
		return notConfigured{}, nil
	case ModeJWT:
		if c.TrustedHeader != "" || c.SecretHeader != "" || c.Secret != "" {
			return nil, fmt.Errorf("%s is %q: unset %s, %s and %s (they belong to mode %q)",
				opt("auth-mode"), c.Mode, opt("trusted-user-header"), opt("trusted-secret-header"), opt("trusted-secret"), ModeTrustedHeader)
		}
		return newJWT(c)
	case ModeTrustedHeader:
		if c.HS256Secret != "" || c.PublicKeyFile != "" {
			return nil, fmt.Errorf("%s is %q: unset %s and %s (they belong to mode %q)",
				opt("auth-mode"), c.Mode, opt("jwt-hs256-secret"), opt("jwt-public-key-file"), ModeJWT)
		}
		return newTrustedHeader(c)
	default:
		return nil, fmt.Errorf("%s: unknown mode %q (want %q or %q)", opt("auth-mode"), c.Mode, ModeJWT, ModeTrustedHeader)
	}
}

// opt names a flag and its environment variable (SYNCHRO_ and the flag's name
// in upper case, as its usage says) for error messages.
func opt(flagName string) string {
	return fmt.Sprintf("--%s (%s)", flagName, envOf(flagName))
}

func envOf(flagName string) string {
	return "SYNCHRO_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// notConfigured refuses every request.
type notConfigured struct{}

func (notConfigured) User(*http.Request) (string, error) {
	return "", authError("authentication is not configured (set SYNCHRO_AUTH_MODE)")
}

// --- jwt ---

type jwtAuth struct {
	alg    string // the only accepted "alg"
	key    any    // []byte, *rsa.PublicKey or *ecdsa.PublicKey
	claim  string
	parser *jwt.Parser
}

func newJWT(c Config) (*jwtAuth, error) {
	claim := c.UserClaim
	if claim == "" {
		claim = DefaultUserClaim
	}
	if err := checkClaimName(claim); err != nil {
		return nil, fmt.Errorf("%s: %w", opt("jwt-user-claim"), err)
	}
	a := &jwtAuth{claim: claim}
	switch {
	case c.HS256Secret != "" && c.PublicKeyFile != "":
		return nil, fmt.Errorf("jwt mode: set only one of %s and %s", opt("jwt-hs256-secret"), opt("jwt-public-key-file"))
	case c.HS256Secret != "":
		if len(c.HS256Secret) < MinHS256SecretLen {
			return nil, fmt.Errorf("%s is too short: need at least %d bytes", opt("jwt-hs256-secret"), MinHS256SecretLen)
		}
		a.alg, a.key = jwt.SigningMethodHS256.Alg(), []byte(c.HS256Secret)
	case c.PublicKeyFile != "":
		alg, key, err := loadPublicKey(c.PublicKeyFile)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", opt("jwt-public-key-file"), err)
		}
		a.alg, a.key = alg, key
	default:
		return nil, fmt.Errorf("jwt mode needs %s or %s", opt("jwt-hs256-secret"), opt("jwt-public-key-file"))
	}
	a.parser = jwt.NewParser(
		jwt.WithValidMethods([]string{a.alg}),
		jwt.WithExpirationRequired(),
		jwt.WithLeeway(Leeway),
	)
	return a, nil
}

// checkClaimName rejects an empty claim name and the registered time claims.
func checkClaimName(claim string) error {
	switch claim {
	case "":
		return errors.New("claim name is empty")
	case "exp", "nbf", "iat":
		return fmt.Errorf("claim %q cannot hold a user id", claim)
	}
	return nil
}

// loadPublicKey reads a PEM public key (PKIX "PUBLIC KEY" or PKCS#1 "RSA PUBLIC
// KEY") and returns the one algorithm it verifies.
func loadPublicKey(path string) (string, any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", nil, err
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return "", nil, fmt.Errorf("%s: no PEM block found", path)
	}
	var pub any
	switch block.Type {
	case "PUBLIC KEY":
		pub, err = x509.ParsePKIXPublicKey(block.Bytes)
	case "RSA PUBLIC KEY":
		pub, err = x509.ParsePKCS1PublicKey(block.Bytes)
	default:
		if strings.Contains(block.Type, "PRIVATE KEY") {
			return "", nil, fmt.Errorf("%s holds a private key; give the server only the public key", path)
		}
		return "", nil, fmt.Errorf("%s: PEM block %q is not a public key", path, block.Type)
	}
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", path, err)
	}
	switch k := pub.(type) {
	case *rsa.PublicKey:
		if k.N.BitLen() < 2048 {
			return "", nil, fmt.Errorf("%s: RSA key has %d bits; need at least 2048", path, k.N.BitLen())
		}
		return jwt.SigningMethodRS256.Alg(), k, nil
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return "", nil, fmt.Errorf("%s: EC key is on curve %s; ES256 needs P-256", path, k.Curve.Params().Name)
		}
		return jwt.SigningMethodES256.Alg(), k, nil
	default:
		return "", nil, fmt.Errorf("%s: unsupported key type %T (want RSA or EC P-256)", path, pub)
	}
}

func (a *jwtAuth) User(r *http.Request) (string, error) {
	tok, err := bearerToken(r)
	if err != nil {
		return "", err
	}
	claims := jwt.MapClaims{}
	if _, err := a.parser.ParseWithClaims(tok, claims, a.keyFunc); err != nil {
		return "", tokenError(err)
	}
	v, ok := claims[a.claim]
	if !ok {
		return "", authError(fmt.Sprintf("token has no %q claim", a.claim))
	}
	user, ok := v.(string)
	if !ok {
		return "", authError(fmt.Sprintf("token claim %q is not a string", a.claim))
	}
	if err := checkUserID(user); err != nil {
		return "", err
	}
	return user, nil
}

// keyFunc returns the configured key only for the configured algorithm (the
// parser's WithValidMethods already enforces this; the check is belt and braces).
func (a *jwtAuth) keyFunc(t *jwt.Token) (any, error) {
	if t.Method == nil || t.Method.Alg() != a.alg {
		return nil, errors.New("unexpected signing method")
	}
	return a.key, nil
}

// bearerToken extracts the token of the request's single Authorization header.
func bearerToken(r *http.Request) (string, error) {
	vals := r.Header.Values("Authorization")
	switch {
	case len(vals) == 0:
		return "", authError("missing Authorization header (want: Bearer <token>)")
	case len(vals) > 1:
		return "", authError("more than one Authorization header")
	}
	scheme, tok, ok := strings.Cut(strings.TrimSpace(vals[0]), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", authError("Authorization header is not a Bearer token")
	}
	tok = strings.TrimSpace(tok)
	switch {
	case tok == "":
		return "", authError("empty bearer token")
	case len(tok) > maxTokenLen:
		return "", authError("bearer token too long")
	}
	return tok, nil
}

// tokenError maps a parser error to a safe message. The parser's own text can
// quote the token's contents (an unknown "alg", a claim's type), so it is dropped.
func tokenError(err error) error {
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return authError("malformed token")
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return authError("token signing algorithm not accepted")
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		// Also an "alg" outside WithValidMethods.
		return authError("invalid token signature or algorithm")
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return authError("token has no exp claim")
	case errors.Is(err, jwt.ErrTokenExpired):
		return authError("token expired")
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return authError("token not valid yet")
	default:
		return authError("invalid token")
	}
}

// checkUserID enforces the user id rules: non-empty, at most MaxUserIDLen bytes,
// valid UTF-8, no control characters. The message never quotes the id.
func checkUserID(u string) error {
	switch {
	case u == "":
		return authError("empty user id")
	case len(u) > MaxUserIDLen:
		return authError(fmt.Sprintf("user id longer than %d bytes", MaxUserIDLen))
	case !utf8.ValidString(u):
		return authError("user id is not valid UTF-8")
	case strings.IndexFunc(u, unicode.IsControl) >= 0:
		return authError("user id contains control characters")
	}
	return nil
}

// MintHS256 returns an HS256 token for user in claim (default "sub"), issued at
// now and expiring after ttl. It is meant for development tokens.
func MintHS256(secret []byte, claim, user string, ttl time.Duration, now time.Time) (string, error) {
	if claim == "" {
		claim = DefaultUserClaim
	}
	switch {
	case len(secret) < MinHS256SecretLen:
		return "", fmt.Errorf("HS256 secret is too short: need at least %d bytes", MinHS256SecretLen)
	case ttl <= 0:
		return "", errors.New("ttl must be positive")
	}
	if err := checkClaimName(claim); err != nil {
		return "", err
	}
	if err := checkUserID(user); err != nil {
		return "", fmt.Errorf("invalid user: %s", err.Error())
	}
	claims := jwt.MapClaims{
		claim: user,
		"iat": jwt.NewNumericDate(now),
		"exp": jwt.NewNumericDate(now.Add(ttl)),
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
}

// --- trusted-header ---

type trustedHeaderAuth struct {
	header       string
	secretHeader string
	secretSum    [sha256.Size]byte // SHA-256 of the shared secret, when secretHeader != ""
}

func newTrustedHeader(c Config) (*trustedHeaderAuth, error) {
	if c.TrustedHeader == "" {
		return nil, fmt.Errorf("trusted-header mode needs %s, e.g. X-Synchro-User", opt("trusted-user-header"))
	}
	if !validHeaderName(c.TrustedHeader) {
		return nil, fmt.Errorf("%s: %q is not a valid header name", opt("trusted-user-header"), c.TrustedHeader)
	}
	a := &trustedHeaderAuth{header: http.CanonicalHeaderKey(c.TrustedHeader)}
	switch {
	case c.SecretHeader == "" && c.Secret == "":
		return a, nil
	case c.SecretHeader == "":
		return nil, fmt.Errorf("%s is set: also set %s", opt("trusted-secret"), opt("trusted-secret-header"))
	case c.Secret == "":
		return nil, fmt.Errorf("%s is set: also set %s", opt("trusted-secret-header"), opt("trusted-secret"))
	case !validHeaderName(c.SecretHeader):
		return nil, fmt.Errorf("%s: %q is not a valid header name", opt("trusted-secret-header"), c.SecretHeader)
	case strings.EqualFold(c.SecretHeader, c.TrustedHeader):
		return nil, fmt.Errorf("%s and %s must name different headers", opt("trusted-secret-header"), opt("trusted-user-header"))
	case len(c.Secret) < MinTrustedSecretLen:
		return nil, fmt.Errorf("%s is too short: need at least %d bytes", opt("trusted-secret"), MinTrustedSecretLen)
	}
	a.secretHeader = http.CanonicalHeaderKey(c.SecretHeader)
	a.secretSum = sha256.Sum256([]byte(c.Secret))
	return a, nil
}

func (a *trustedHeaderAuth) User(r *http.Request) (string, error) {
	if a.secretHeader != "" {
		vals := r.Header.Values(a.secretHeader)
		if len(vals) != 1 {
			return "", authError(fmt.Sprintf("missing or repeated %s header", a.secretHeader))
		}
		// Comparing digests keeps the comparison constant-time in the length too.
		got := sha256.Sum256([]byte(vals[0]))
		if subtle.ConstantTimeCompare(got[:], a.secretSum[:]) != 1 {
			return "", authError(fmt.Sprintf("wrong %s header", a.secretHeader))
		}
	}
	vals := r.Header.Values(a.header)
	switch {
	case len(vals) == 0:
		return "", authError(fmt.Sprintf("missing %s header", a.header))
	case len(vals) > 1:
		return "", authError(fmt.Sprintf("more than one %s header", a.header))
	}
	if err := checkUserID(vals[0]); err != nil {
		return "", err
	}
	return vals[0], nil
}

// validHeaderName reports whether s is an RFC 9110 field name (a token).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
