package apiserver

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"time"
)

// keyPair is a certificate with its private key, both PEM-encoded.
type keyPair struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte
	keyPEM  []byte
}

// newCA makes a self-signed certificate authority valid for a day.
func newCA(commonName string) (*keyPair, error) {
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: commonName},
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	return sign(tmpl, nil)
}

// newServingCert makes a server certificate signed by ca for the given names.
func newServingCert(ca *keyPair, ips []net.IP, dnsNames []string) (*keyPair, error) {
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "ipvs-proxy-e2e-apiserver"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: ips,
		DNSNames:    dnsNames,
	}
	return sign(tmpl, ca)
}

// newClientCert makes a client certificate signed by ca; the API server
// authenticates it as user commonName in the given groups.
func newClientCert(ca *keyPair, commonName string, groups []string) (*keyPair, error) {
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: commonName, Organization: groups},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	return sign(tmpl, ca)
}

// sign fills in serial number, validity and key, then signs tmpl with parent,
// or self-signs it when parent is nil.
func sign(tmpl *x509.Certificate, parent *keyPair) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key for %s: %w", tmpl.Subject.CommonName, err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, fmt.Errorf("serial for %s: %w", tmpl.Subject.CommonName, err)
	}
	tmpl.SerialNumber = serial.Add(serial, big.NewInt(1))
	tmpl.NotBefore = time.Now().Add(-time.Hour) // tolerate clock skew with the VM
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)

	parentCert, parentKey := tmpl, crypto.Signer(key)
	if parent != nil {
		parentCert, parentKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parentCert, key.Public(), parentKey)
	if err != nil {
		return nil, fmt.Errorf("sign certificate for %s: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse certificate for %s: %w", tmpl.Subject.CommonName, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("marshal key for %s: %w", tmpl.Subject.CommonName, err)
	}
	return &keyPair{
		cert:    cert,
		key:     key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// writeFiles writes the certificate and key of kp to certPath and keyPath.
func (kp *keyPair) writeFiles(certPath, keyPath string) error {
	if err := os.WriteFile(certPath, kp.certPEM, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", certPath, err)
	}
	if keyPath == "" {
		return nil
	}
	if err := os.WriteFile(keyPath, kp.keyPEM, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", keyPath, err)
	}
	return nil
}
