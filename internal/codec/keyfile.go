package codec

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/pveflow/pveflow/internal/secretfile"
)

const (
	// KeySize is the size of an AES-256 key in bytes.
	KeySize = 32
	// maxKeyIDLength bounds a key ID; IDs travel in every payload's metadata.
	maxKeyIDLength = 64
	// maxKeyFileSize bounds what LoadKeyFile reads: a key line is about 110 bytes.
	maxKeyFileSize = 1 << 20
)

var keyIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ErrKeyFile is wrapped by every error LoadKeyFile returns for a key file it refuses. None of
// them quotes a key or a line of the file: they give the file's name, the line number and the
// key ID.
var ErrKeyFile = errors.New("codec: bad key file")

// LoadKeyFile reads the key file at path and returns a Codec that encrypts with its first key and
// decrypts with all of them.
//
// The key file is text, one key a line:
//
//	# comment
//	<key-id> <key>
//
// where <key-id> is 1 to 64 characters of A-Z a-z 0-9 . _ -, starting with a letter or digit,
// and <key> is the standard (padded) base64 encoding of 32 random bytes, for example the output
// of `openssl rand -base64 32` or `head -c 32 /dev/urandom | base64`. Blank lines and lines
// starting with # are ignored, and so is space around a line.
//
// The first key encrypts; every key decrypts. To rotate, put a new key on the first line and
// keep the old ones below it for as long as histories sealed with them are kept (the namespace's
// retention period), and give the same file to everything that encodes or decodes: the worker,
// the starter and the codec server. A key whose line is removed leaves the payloads sealed with
// it unreadable.
//
// LoadKeyFile refuses, with an error wrapping ErrKeyFile:
//   - a file that others may read or write, or that its group may write (its mode must be 0640
//     or stricter: 0600, 0400 and 0440 are usual);
//   - a line that is not two fields, a key ID outside the pattern above, a key that is not
//     base64, or whose bytes are not 32;
//   - a key ID on two lines;
//   - a file with no key.
func LoadKeyFile(path string) (*Codec, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("codec: key file: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("codec: key file: %w", err)
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%w %s: not a regular file", ErrKeyFile, path)
	}
	if err := secretfile.CheckMode(path, info.Mode()); err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrKeyFile, path, err)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxKeyFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("codec: key file: %w", err)
	}
	if len(data) > maxKeyFileSize {
		return nil, fmt.Errorf("%w %s: larger than %d bytes", ErrKeyFile, path, maxKeyFileSize)
	}
	c, err := parseKeys(data)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrKeyFile, path, err)
	}
	c.path = path
	return c, nil
}

// parseKeys parses the content of a key file. Its errors name line numbers and key IDs, never a
// line's text: a malformed line may hold a key.
func parseKeys(data []byte) (*Codec, error) {
	c := &Codec{keys: make(map[string]cipher.AEAD)}
	firstLine := make(map[string]int)
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxKeyFileSize)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return nil, fmt.Errorf(`line %d: has %d fields, want 2: "<key-id> <base64 key>"`, n, len(fields))
		}
		id, encoded := fields[0], fields[1]
		if !keyIDPattern.MatchString(id) {
			// Not quoted: a line written the wrong way round has its key here.
			return nil, fmt.Errorf("line %d: the key ID is not 1 to %d characters of A-Z a-z 0-9 . _ - starting with a letter or digit", n, maxKeyIDLength)
		}
		if prev, ok := firstLine[id]; ok {
			return nil, fmt.Errorf("line %d: key ID %q is already on line %d", n, id, prev)
		}
		key, err := base64.StdEncoding.DecodeString(encoded)
		if err != nil {
			// base64's own error gives an offset into the key; it is left out all the same.
			return nil, fmt.Errorf("line %d: key %q is not standard base64", n, id)
		}
		if len(key) != KeySize {
			return nil, fmt.Errorf("line %d: key %q is %d bytes, want %d (AES-256)", n, id, len(key), KeySize)
		}
		aead, err := newAEAD(key)
		if err != nil {
			return nil, fmt.Errorf("line %d: key %q: %w", n, id, err)
		}
		firstLine[id] = n
		c.keys[id] = aead
		if c.encryptKeyID == "" {
			c.encryptKeyID = id
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if c.encryptKeyID == "" {
		return nil, errors.New(`no key: want lines "<key-id> <base64 key>"`)
	}
	return c, nil
}

// newAEAD returns AES-256-GCM under key, sealing with a random 12-byte nonce (from crypto/rand's
// source) that Seal prepends to the ciphertext and Open takes from it.
func newAEAD(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCMWithRandomNonce(block)
}
