package main

import (
	"os"
	"path/filepath"
	"testing"
)

const spec = `cdiVersion: "0.6.0"
kind: example.com/gpu
containerEdits:
  env: ["SPEC=1"]
devices:
  - name: g0
    containerEdits:
      env: ["GPU=0", "SPEC=2"]
      mounts:
        - {hostPath: /tmp, containerPath: /gpu0}
`

func TestResolveMergesSpecAndDeviceEditsAndRefusesUnknownIDs(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "gpu.yaml"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &runtime{cdiDir: dir}
	v, err := r.resolve([]string{"example.com/gpu=g0"})
	if err != nil {
		t.Fatal(err)
	}
	if v.Env["GPU"] != "0" || v.Env["SPEC"] != "2" {
		t.Fatalf("env %v: want the device's edits after the spec's", v.Env)
	}
	if len(v.Mounts) != 1 || len(v.CDIDevices) != 1 {
		t.Fatalf("mounts %v, ids %v", v.Mounts, v.CDIDevices)
	}
	if _, err := r.resolve([]string{"example.com/gpu=missing"}); err == nil {
		t.Fatal("an unknown CDI id resolved; a runtime refuses it")
	}
}
