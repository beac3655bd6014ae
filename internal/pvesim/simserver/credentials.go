package simserver

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/google/uuid"
)

// File names inside Options.Dir.
const (
	caFileName    = "ca.pem"
	tokenFileName = "token"
)

// DefaultTokenUser is the API token id the server accepts when Options.TokenUser is empty.
const DefaultTokenUser = "pveflow@pve!sim"

// tokenIDRE is the shape of a PVE API token id, user@realm!tokenid (pve-access-control's user
// and token name formats).
var tokenIDRE = regexp.MustCompile(`^[^\s=:@]+@[A-Za-z][A-Za-z0-9.\-_]+![A-Za-z][A-Za-z0-9.\-_]+$`)

// credentials are what a client needs to talk to the server: the server's certificate and the
// CA that signed it, and the one API token the server accepts.
type credentials struct {
	cert   tls.Certificate
	caPEM  []byte
	user   string
	secret string
}

func newCredentials(user string) (*credentials, error) {
	if !tokenIDRE.MatchString(user) {
		return nil, fmt.Errorf("token user %q is not of the form user@realm!tokenid", user)
	}
	cert, caPEM, err := newCertificate()
	if err != nil {
		return nil, err
	}
	secret, err := newSecret()
	if err != nil {
		return nil, err
	}
	return &credentials{cert: cert, caPEM: caPEM, user: user, secret: secret}, nil
}

// newCertificate makes a throw-away CA and a server certificate it signs for the loopback names,
// so a client trusts the server through its CA file exactly as it would trust a real host's.
func newCertificate() (tls.Certificate, []byte, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("generate CA key: %w", err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "pvesim CA", Organization: []string{"pveflow simulator"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(1, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("create CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("parse CA certificate: %w", err)
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("generate server key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "localhost", Organization: []string{"pveflow simulator"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(1, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("create server certificate: %w", err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der, caDER}, PrivateKey: key}
	return cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), nil
}

// newSecret makes a token secret in PVE's format, a random UUID.
func newSecret() (string, error) {
	secret, err := uuid.NewRandom()
	if err != nil {
		return "", fmt.Errorf("generate token secret: %w", err)
	}
	return secret.String(), nil
}

// writeFiles writes the CA and the token file into dir, readable by the owner only: the token
// file is a credential, and the client reads both from there.
func (c *credentials) writeFiles(dir string) (caFile, tokenFile string, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", err
	}
	caFile = filepath.Join(dir, caFileName)
	tokenFile = filepath.Join(dir, tokenFileName)
	if err := writeFile(caFile, c.caPEM); err != nil {
		return "", "", err
	}
	if err := writeFile(tokenFile, []byte(c.user+"="+c.secret)); err != nil {
		return "", "", err
	}
	return caFile, tokenFile, nil
}

// writeFile replaces name with data at mode 0600, also when an earlier run left the file with
// wider permissions.
func writeFile(name string, data []byte) error {
	if err := os.WriteFile(name, data, 0o600); err != nil {
		return err
	}
	return os.Chmod(name, 0o600)
}

// Reasons of the 401 answers (pve-manager PVE/HTTPServer.pm auth_handler, 9.1.5 and later).
const (
	reasonNoTicket   = "No ticket"
	reasonAuthFailed = "Authentication failed!"
)

// authenticate checks an Authorization header and returns "" when it carries the server's
// token, or the reason phrase of the 401 otherwise.
//
// PVE finds the token with `(?:^|\s)PVEAPIToken(?:=| )([^;]*)` and splits it on its last '=',
// so both "PVEAPIToken=u@r!t=secret" and "PVEAPIToken u@r!t=secret" are accepted.
func (c *credentials) authenticate(header string) string {
	value, ok := apiTokenValue(header)
	if !ok {
		return reasonNoTicket
	}
	i := strings.LastIndexByte(value, '=')
	if i < 0 {
		return reasonAuthFailed
	}
	userOK := subtle.ConstantTimeCompare([]byte(value[:i]), []byte(c.user)) == 1
	secretOK := subtle.ConstantTimeCompare([]byte(value[i+1:]), []byte(c.secret)) == 1
	if !userOK || !secretOK {
		return reasonAuthFailed
	}
	return ""
}

var apiTokenRE = regexp.MustCompile(`(?:^|\s)PVEAPIToken(?:=| )([^;]*)`)

// apiTokenValue extracts the token from an Authorization header; an empty value counts as none,
// as in PVE, where it is Perl-false.
func apiTokenValue(header string) (string, bool) {
	m := apiTokenRE.FindStringSubmatch(header)
	if m == nil || m[1] == "" {
		return "", false
	}
	return m[1], true
}
