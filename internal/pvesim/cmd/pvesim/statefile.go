package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/pveflow/pveflow/internal/pvesim"
)

// saveEvery is how often the state file is brought up to date: a simulator killed loses what
// changed since, at most this long. Saving on every change would mean a hook in every method
// of the model that changes it; a second is shorter than any task pveflow waits for.
const saveEvery = time.Second

// loadState restores cluster from the state file at path, if there is one, and reports
// whether there was.
func loadState(cluster *pvesim.Cluster, path string) (bool, error) {
	// The directory is made now, so that the first save does not fail on it.
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return false, err
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var s pvesim.Snapshot
	if err := json.Unmarshal(data, &s); err != nil {
		return false, fmt.Errorf("state file %s: %w (remove it to start from the default cluster)", path, err)
	}
	if err := cluster.Restore(s); err != nil {
		return false, fmt.Errorf("state file %s: %w (remove it to start from the default cluster)", path, err)
	}
	return true, nil
}

// stateFile keeps a cluster's Snapshot in a file.
type stateFile struct {
	cluster *pvesim.Cluster
	path    string
	// saved is what the file holds: an unchanged cluster is not written again.
	saved []byte
}

// save writes the cluster's Snapshot to the file if it changed since the last save. The file
// is replaced whole, by a rename, so a crash mid-write leaves the previous one.
func (f *stateFile) save() error {
	data, err := json.Marshal(f.cluster.Snapshot())
	if err != nil {
		return err
	}
	if bytes.Equal(data, f.saved) {
		return nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(f.path), filepath.Base(f.path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), f.path); err != nil {
		return err
	}
	f.saved = data
	return nil
}

// keep saves the cluster every saveEvery until ctx is done, and once more then.
func (f *stateFile) keep(ctx context.Context, logger *slog.Logger) error {
	tick := time.NewTicker(saveEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return f.save()
		case <-tick.C:
			if err := f.save(); err != nil {
				logger.Error("saving the cluster's state failed", slog.String("file", f.path), slog.Any("error", err))
			}
		}
	}
}
