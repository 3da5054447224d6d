// nvmlwalk walks an NVML machine with go-nvml and go-nvlib as NVIDIA's DRA driver does, and
// prints what it saw as JSON; tests/fakegpu/nvmlwalk.py walks the same way with pynvml, and
// tests/fakegpu/test_golang.py compares the two field by field on one fake machine.
//
//	nvmlwalk walk                 the whole machine: raw NVML values, and go-nvlib's views
//	nvmlwalk mig GPU PROFILE      MIG on, a GPU instance and its compute instance of PROFILE
//	                              (a go-nvlib profile string such as 3g.40gb or 1c.3g.40gb)
//	nvmlwalk events N TIMEOUT_MS  register XID and ECC events on every GPU, print "ready", then
//	                              print each event (or the return code that ends the wait)
//	nvmlwalk threads N CALLS      N goroutines, each on its own OS thread, CALLS UUID reads each
//	nvmlwalk bench N              the walk (without printing it) N times: milliseconds of each
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

type obj = map[string]any

// val is a value, or {"error": code} when the call did not succeed.
func val(v any, ret nvml.Return) any {
	if ret != nvml.SUCCESS {
		return obj{"error": int(ret)}
	}
	return v
}

func cstr(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

func giV1(p nvml.GpuInstanceProfileInfo) obj {
	return obj{"id": p.Id, "p2p": p.IsP2pSupported, "slices": p.SliceCount, "instances": p.InstanceCount,
		"sms": p.MultiprocessorCount, "ce": p.CopyEngineCount, "dec": p.DecoderCount, "enc": p.EncoderCount,
		"jpg": p.JpegCount, "ofa": p.OfaCount, "memory_mb": p.MemorySizeMB}
}

func memory(d nvml.Device) any {
	m, ret := d.GetMemoryInfo()
	return val(obj{"total": m.Total, "free": m.Free, "used": m.Used}, ret)
}

func attributes(d nvml.Device) any {
	a, ret := d.GetAttributes()
	return val(obj{"sms": a.MultiprocessorCount, "ce": a.SharedCopyEngineCount, "dec": a.SharedDecoderCount,
		"enc": a.SharedEncoderCount, "jpg": a.SharedJpegCount, "ofa": a.SharedOfaCount,
		"gi_slices": a.GpuInstanceSliceCount, "ci_slices": a.ComputeInstanceSliceCount,
		"memory_mb": a.MemorySizeMB}, ret)
}

func gpuInstances(d nvml.Device, info nvml.GpuInstanceProfileInfo) any {
	gis, ret := d.GetGpuInstances(&info)
	if ret != nvml.SUCCESS {
		return obj{"error": int(ret)}
	}
	out := []any{}
	for _, gi := range gis {
		gInfo, ret := gi.GetInfo()
		entry := obj{"info": val(obj{"id": gInfo.Id, "profile": gInfo.ProfileId,
			"start": gInfo.Placement.Start, "size": gInfo.Placement.Size}, ret)}
		cis := []any{}
		for p := 0; p < nvml.COMPUTE_INSTANCE_PROFILE_COUNT; p++ {
			ci, ret := gi.GetComputeInstanceProfileInfo(p, 0)
			prof := obj{"profile": p}
			if ret != nvml.SUCCESS {
				prof["error"] = int(ret)
				cis = append(cis, prof)
				continue
			}
			prof["id"], prof["slices"], prof["instances"], prof["sms"] = ci.Id, ci.SliceCount, ci.InstanceCount, ci.MultiprocessorCount
			v2, ret := gi.GetComputeInstanceProfileInfoV(p, 0).V2()
			prof["v2_name"] = val(cstr(v2.Name[:]), ret)
			remaining, ret := gi.GetComputeInstanceRemainingCapacity(&ci)
			prof["remaining"] = val(remaining, ret)
			list, ret := gi.GetComputeInstances(&ci)
			instances := []any{}
			for _, c := range list {
				cInfo, ret := c.GetInfo()
				instances = append(instances, val(obj{"id": cInfo.Id, "profile": cInfo.ProfileId,
					"start": cInfo.Placement.Start, "size": cInfo.Placement.Size}, ret))
			}
			prof["compute_instances"] = val(instances, ret)
			cis = append(cis, prof)
		}
		entry["ci_profiles"] = cis
		out = append(out, entry)
	}
	return out
}

func walkDevice(lib device.Interface, i int, d device.Device) obj {
	r := obj{}
	r["name"] = val(d.GetName())
	r["uuid"] = val(d.GetUUID())
	r["index"] = val(d.GetIndex())
	r["minor"] = val(d.GetMinorNumber())
	brand, ret := d.GetBrand()
	r["brand"] = val(int(brand), ret)
	arch, ret := d.GetArchitecture()
	r["arch"] = val(int(arch), ret)
	major, minor, ret := d.GetCudaComputeCapability()
	r["cc"] = val([]int{major, minor}, ret)
	pci, ret := d.GetPciInfo()
	r["pci"] = val(obj{"bus_id": cstr(pci.BusId[:]), "bus_id_legacy": cstr(pci.BusIdLegacy[:]), "domain": pci.Domain,
		"bus": pci.Bus, "device": pci.Device, "device_id": pci.PciDeviceId, "subsystem_id": pci.PciSubSystemId}, ret)
	r["memory"] = memory(d)
	m2, ret := d.GetMemoryInfo_v2()
	r["memory_v2"] = val(obj{"total": m2.Total, "reserved": m2.Reserved, "free": m2.Free, "used": m2.Used}, ret)
	pm, ret := d.GetPersistenceMode()
	r["persistence"] = val(int(pm), ret)
	vm, ret := d.GetVirtualizationMode()
	r["virtualization"] = val(int(vm), ret)
	cur, pend, ret := d.GetMigMode()
	r["mig_mode"] = val([]int{cur, pend}, ret)
	r["max_mig"] = val(d.GetMaxMigDeviceCount())
	r["event_types"] = val(d.GetSupportedEventTypes())
	r["attributes"] = attributes(d)
	profiles := []any{}
	for p := 0; p < nvml.GPU_INSTANCE_PROFILE_COUNT; p++ {
		info, ret := d.GetGpuInstanceProfileInfo(p)
		prof := obj{"index": p}
		if ret != nvml.SUCCESS {
			prof["error"] = int(ret)
			profiles = append(profiles, prof)
			continue
		}
		prof["v1"] = giV1(info)
		v2, ret := d.GetGpuInstanceProfileInfoV(p).V2()
		prof["v2_name"] = val(cstr(v2.Name[:]), ret)
		v3, ret := d.GetGpuInstanceProfileInfoV(p).V3()
		prof["v3"] = val(obj{"id": v3.Id, "name": cstr(v3.Name[:]), "memory_mb": v3.MemorySizeMB}, ret)
		placements, ret := d.GetGpuInstancePossiblePlacements(&info)
		list := [][]uint32{}
		for _, pl := range placements {
			list = append(list, []uint32{pl.Start, pl.Size})
		}
		prof["placements"] = val(list, ret)
		prof["remaining"] = val(d.GetGpuInstanceRemainingCapacity(&info))
		prof["gpu_instances"] = gpuInstances(d, info)
		profiles = append(profiles, prof)
	}
	r["gi_profiles"] = profiles
	migs := []any{}
	count, ret := d.GetMaxMigDeviceCount()
	for j := 0; ret == nvml.SUCCESS && j < count; j++ {
		m, ret := d.GetMigDeviceHandleByIndex(j)
		if ret != nvml.SUCCESS {
			migs = append(migs, obj{"error": int(ret)})
			continue
		}
		entry := obj{}
		entry["uuid"] = val(m.GetUUID())
		entry["name"] = val(m.GetName())
		entry["is_mig"] = val(m.IsMigDeviceHandle())
		entry["gi"] = val(m.GetGpuInstanceId())
		entry["ci"] = val(m.GetComputeInstanceId())
		entry["memory"] = memory(m)
		entry["attributes"] = attributes(m)
		parent, ret := m.GetDeviceHandleFromMigDeviceHandle()
		if ret == nvml.SUCCESS {
			entry["parent_uuid"] = val(parent.GetUUID())
		} else {
			entry["parent_uuid"] = obj{"error": int(ret)}
		}
		migs = append(migs, entry)
	}
	r["mig_devices"] = migs

	// go-nvlib's own views, as NVIDIA's driver reads them
	nv := obj{}
	nv["arch"] = orErr(d.GetArchitectureAsString())
	nv["brand"] = orErr(d.GetBrandAsString())
	nv["cc"] = orErr(d.GetCudaComputeCapabilityAsString())
	nv["pci_bus_id"] = orErr(d.GetPCIBusID())
	nv["mig_capable"] = orErr(d.IsMigCapable())
	nv["mig_enabled"] = orErr(d.IsMigEnabled())
	nv["fabric_attached"] = orErr(d.IsFabricAttached())
	names := []string{}
	if ps, err := d.GetMigProfiles(); err == nil {
		for _, p := range ps {
			names = append(names, p.String())
		}
		nv["mig_profiles"] = names
	} else {
		nv["mig_profiles"] = obj{"go_error": err.Error()}
	}
	devs := []any{}
	err := d.VisitMigDevices(func(j int, m device.MigDevice) error {
		p, err := m.GetProfile()
		if err != nil {
			return err
		}
		uuid, _ := m.GetUUID()
		devs = append(devs, obj{"index": j, "uuid": uuid, "profile": p.String()})
		return nil
	})
	if err != nil {
		nv["mig_devices"] = obj{"go_error": err.Error()}
	} else {
		nv["mig_devices"] = devs
	}
	r["nvlib"] = nv
	return r
}

func orErr(v any, err error) any {
	if err != nil {
		return obj{"go_error": err.Error()}
	}
	return v
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "nvmlwalk: "+format+"\n", args...)
	os.Exit(1)
}

func emit(v any) {
	if err := json.NewEncoder(os.Stdout).Encode(v); err != nil {
		fail("%v", err)
	}
}

func walk(lib nvml.Interface) {
	devlib := device.New(lib)
	r := obj{}
	r["driver_version"] = val(lib.SystemGetDriverVersion())
	r["cuda_driver_version"] = val(lib.SystemGetCudaDriverVersion())
	r["count"] = val(lib.DeviceGetCount())
	devices := []any{}
	err := devlib.VisitDevices(func(i int, d device.Device) error {
		devices = append(devices, walkDevice(devlib, i, d))
		return nil
	})
	if err != nil {
		fail("VisitDevices: %v", err)
	}
	r["devices"] = devices
	byUUID := []any{}
	for _, dev := range devices {
		uuid, ok := dev.(obj)["uuid"].(string)
		if !ok {
			continue
		}
		h, ret := lib.DeviceGetHandleByUUID(uuid)
		if ret != nvml.SUCCESS {
			byUUID = append(byUUID, obj{"error": int(ret)})
			continue
		}
		byUUID = append(byUUID, val(h.GetIndex()))
	}
	r["by_uuid"] = byUUID
	emit(r)
}

func mig(lib nvml.Interface, gpu int, profile string) {
	devlib := device.New(lib)
	d, ret := lib.DeviceGetHandleByIndex(gpu)
	if ret != nvml.SUCCESS {
		fail("DeviceGetHandleByIndex(%d): %v", gpu, ret)
	}
	activation, ret := d.SetMigMode(nvml.DEVICE_MIG_ENABLE)
	if ret != nvml.SUCCESS {
		fail("SetMigMode: %v", ret)
	}
	p, err := devlib.ParseMigProfile(profile)
	if err != nil {
		fail("ParseMigProfile(%q): %v", profile, err)
	}
	info := p.GetInfo()
	giInfo, ret := d.GetGpuInstanceProfileInfo(info.GIProfileID)
	if ret != nvml.SUCCESS {
		fail("GetGpuInstanceProfileInfo(%d): %v", info.GIProfileID, ret)
	}
	gi, ret := d.CreateGpuInstance(&giInfo)
	if ret != nvml.SUCCESS {
		fail("CreateGpuInstance(%s): %v", profile, ret)
	}
	ciInfo, ret := gi.GetComputeInstanceProfileInfo(info.CIProfileID, info.CIEngProfileID)
	if ret != nvml.SUCCESS {
		fail("GetComputeInstanceProfileInfo: %v", ret)
	}
	ci, ret := gi.CreateComputeInstance(&ciInfo)
	if ret != nvml.SUCCESS {
		fail("CreateComputeInstance: %v", ret)
	}
	g, _ := gi.GetInfo()
	c, _ := ci.GetInfo()
	emit(obj{"activation": int(activation), "profile": p.String(), "gi": g.Id, "gi_start": g.Placement.Start,
		"ci": c.Id, "ci_profile": c.ProfileId})
}

func events(lib nvml.Interface, n int, timeout int) {
	set, ret := lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		fail("EventSetCreate: %v", ret)
	}
	count, _ := lib.DeviceGetCount()
	handles := make([]nvml.Device, count)
	for i := 0; i < count; i++ {
		d, _ := lib.DeviceGetHandleByIndex(i)
		handles[i] = d
		types := uint64(nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeSingleBitEccError)
		if ret := d.RegisterEvents(types, set); ret != nvml.SUCCESS {
			fail("RegisterEvents(%d): %v", i, ret)
		}
	}
	fmt.Println("ready")
	os.Stdout.Sync()
	for got := 0; got < n; {
		data, ret := set.Wait(uint32(timeout))
		if ret == nvml.ERROR_TIMEOUT {
			continue
		}
		if ret != nvml.SUCCESS {
			emit(obj{"return": int(ret), "text": nvml.ErrorString(ret)})
			break
		}
		idx := -1 // by handle: a lost GPU answers GPU_IS_LOST to every query, GetIndex too
		for i, h := range handles {
			if h == data.Device {
				idx = i
			}
		}
		emit(obj{"gpu": idx, "type": data.EventType, "data": data.EventData})
		got++
	}
	set.Free()
}

func bench(lib nvml.Interface, n int) {
	runs := []float64{}
	devices := 0
	for k := 0; k < n; k++ {
		devlib := device.New(lib) // a fresh one each time: go-nvlib caches MIG profiles per device
		started := time.Now()
		devices = 0
		err := devlib.VisitDevices(func(i int, d device.Device) error {
			walkDevice(devlib, i, d)
			devices++
			return nil
		})
		if err != nil {
			fail("VisitDevices: %v", err)
		}
		runs = append(runs, float64(time.Since(started).Microseconds())/1000)
	}
	emit(obj{"devices": devices, "walk_ms": runs})
}

func threads(lib nvml.Interface, n int, calls int) {
	count, _ := lib.DeviceGetCount()
	want := make([]string, count)
	for i := range want {
		d, _ := lib.DeviceGetHandleByIndex(i)
		want[i], _ = d.GetUUID()
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	bad := 0
	for k := 0; k < n; k++ {
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			runtime.LockOSThread() // a thread Python has never seen: the bridge must take the GIL on it
			for c := 0; c < calls; c++ {
				i := (k + c) % count
				d, ret := lib.DeviceGetHandleByIndex(i)
				uuid, ret2 := d.GetUUID()
				if ret != nvml.SUCCESS || ret2 != nvml.SUCCESS || uuid != want[i] {
					mu.Lock()
					bad++
					mu.Unlock()
				}
			}
		}(k)
	}
	wg.Wait()
	emit(obj{"calls": n * calls, "bad": bad})
}

func main() {
	if len(os.Args) < 2 {
		fail("usage: nvmlwalk walk | mig GPU PROFILE | events N TIMEOUT_MS | threads N CALLS | bench N")
	}
	lib := nvml.New()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		fail("Init: %v", ret)
	}
	defer lib.Shutdown()
	switch os.Args[1] {
	case "walk":
		walk(lib)
	case "mig":
		gpu, _ := strconv.Atoi(os.Args[2])
		mig(lib, gpu, os.Args[3])
	case "bench":
		n, _ := strconv.Atoi(os.Args[2])
		bench(lib, n)
	case "threads":
		n, _ := strconv.Atoi(os.Args[2])
		calls, _ := strconv.Atoi(os.Args[3])
		threads(lib, n, calls)
	case "events":
		n, _ := strconv.Atoi(os.Args[2])
		timeout, _ := strconv.Atoi(os.Args[3])
		events(lib, n, timeout)
	default:
		fail("unknown command %q", os.Args[1])
	}
}
