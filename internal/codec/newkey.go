package codec

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"time"
)

// ValidKeyID reports whether id can name a key in a key file: 1 to 64 characters of A-Z a-z 0-9
// . _ -, starting with a letter or digit.
func ValidKeyID(id string) bool { return keyIDPattern.MatchString(id) }

// WriteNewKeyFile creates path, mode 0600, with one new key from crypto/rand named id, and
// checks that LoadKeyFile reads it back. An existing path is an error and left as it is: it may
// hold the keys of recorded histories. A file that could not be written whole is removed.
func WriteNewKeyFile(path, id string) (err error) {
	if !ValidKeyID(id) {
		return fmt.Errorf("%w: key ID %q: want 1 to 64 characters of A-Z a-z 0-9 . _ - starting with a letter or digit", ErrKeyFile, id)
	}
	key := make([]byte, KeySize)
	rand.Read(key) // never fails (crypto/rand)
	content := fmt.Sprintf("# pveflow payload keys (PVEFLOW_CODEC_KEY_FILE): the first encrypts, all decrypt.\n"+
		"# Made on %s. Keep every key as long as histories sealed with it are kept.\n"+
		"%s %s\n", time.Now().UTC().Format(time.DateOnly), id, base64.StdEncoding.EncodeToString(key))

	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%s exists: it may hold the keys of recorded histories, so it is not replaced", path)
	}
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(path)
		}
	}()
	if _, err := f.WriteString(content); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	_, err = LoadKeyFile(path)
	return err
}
