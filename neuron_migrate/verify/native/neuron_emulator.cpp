// The emulated `neuron` device with real storage: a PrivateUse1 backend whose memory is host memory.
//
// Allocation, copies, empty/resize/set_ and the basic views are kernels of their own; every other operator
// runs through one boxed fallback: the device tensors among its arguments become CPU tensors on the same
// memory, the CPU kernel runs, and its results come back as device tensors (a view of a device input shares
// that input's storage; a new result keeps the memory the CPU kernel allocated). Each operator that reaches
// the device is counted, and operators that mix device tensors with CPU tensors are counted (strict: refused).
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/EmptyTensor.h>
#include <ATen/core/GeneratorForPrivateuseone.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

namespace {

constexpr auto kDevice = c10::DeviceType::PrivateUse1;

// -- counters and settings ---------------------------------------------------------------------------------
std::mutex stats_mutex;
std::map<std::string, int64_t> ops_seen, ops_mixed, ops_tracked;
bool strict_mode = false;
c10::DeviceIndex device_count = 1;
thread_local c10::DeviceIndex current_device = 0;

const std::set<std::string> kCrossDevice = {"copy_", "_to_copy", "_copy_from", "_copy_from_and_resize", "set_",
                                            "index", "index_put_", "_index_put_impl_"};

std::string op_name(const c10::OperatorHandle& op) {
  const auto& name = op.schema().operator_name();
  auto base = name.name.substr(name.name.find("::") + 2);
  return name.overload_name.empty() ? base : base + "." + name.overload_name;
}

void count(const std::string& name) {
  std::lock_guard<std::mutex> lock(stats_mutex);
  ops_seen[name]++;
  ops_tracked[name]++;
}

// -- memory ------------------------------------------------------------------------------------------------
void free_host(void* ptr) { std::free(ptr); }

struct DeviceAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* data = nbytes ? std::aligned_alloc(64, (nbytes + 63) / 64 * 64) : nullptr;
    TORCH_CHECK(!nbytes || data, "emulated neuron device: out of host memory (", nbytes, " bytes)");
    return {data, data, &free_host, c10::Device(kDevice, current_device)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_host; }
  void copy_data(void* dest, const void* src, std::size_t count) const final { default_copy_data(dest, src, count); }
};
DeviceAllocator device_allocator;

std::mutex pinned_mutex;
std::set<const void*> pinned_ptrs;

void free_pinned(void* ptr) {
  { std::lock_guard<std::mutex> lock(pinned_mutex); pinned_ptrs.erase(ptr); }
  std::free(ptr);
}

struct PinnedAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* data = nbytes ? std::malloc(nbytes) : nullptr;
    if (data) { std::lock_guard<std::mutex> lock(pinned_mutex); pinned_ptrs.insert(data); }
    return {data, data, &free_pinned, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const final { default_copy_data(dest, src, count); }
};
PinnedAllocator pinned_allocator;

void release_storage(void* ctx) { delete static_cast<c10::Storage*>(ctx); }

// A CPU tensor on the memory of a device tensor (the storage object is the CPU's own, so a CPU kernel that
// resizes it gets new CPU memory, which `sync_back` moves into the device storage). Its memory holds a
// reference to the device storage: a CPU tensor can outlive the operator that made it (gloo's collectives run
// on a thread of their own and their Work keeps the CPU tensors until `wait`), and the device tensor may be
// freed meanwhile (a compiled graph drops a collective's input as soon as the collective is issued).
at::Tensor cpu_alias(const at::Tensor& t) {
  const auto& storage = t.storage();
  c10::Storage host(c10::Storage::use_byte_size_t(), storage.nbytes(),
                    c10::DataPtr(storage.mutable_data(), new c10::Storage(storage), &release_storage,
                                 c10::Device(c10::kCPU)),
                    c10::GetCPUAllocator(), true);
  auto out = at::detail::make_tensor<c10::TensorImpl>(std::move(host), c10::DispatchKeySet(c10::DispatchKey::CPU),
                                                      t.dtype());
  out.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  return out;
}

// Device memory for memory a CPU kernel allocated: it keeps the CPU storage alive.
c10::DataPtr adopt_data(const c10::Storage& host, c10::DeviceIndex index) {
  return {host.mutable_data(), new c10::Storage(host), &release_storage, c10::Device(kDevice, index)};
}

c10::Storage adopt(const c10::Storage& host, c10::DeviceIndex index) {
  return c10::Storage(c10::Storage::use_byte_size_t(), host.nbytes(), adopt_data(host, index), &device_allocator,
                      true);
}

at::Generator inner_generator(const at::Generator& g);

at::Tensor device_tensor(c10::Storage storage, const at::Tensor& like) {
  auto out = at::detail::make_tensor<c10::TensorImpl>(std::move(storage),
                                                      c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), like.dtype());
  out.unsafeGetTensorImpl()->set_sizes_and_strides(like.sizes(), like.strides(), like.storage_offset());
  return out;
}

// -- the boxed CPU fallback --------------------------------------------------------------------------------
struct Alias {
  at::Tensor device, host;
};

c10::IValue to_cpu(const c10::IValue& v, std::vector<Alias>& aliases) {
  if (v.isTensor()) {
    const auto& t = v.toTensor();
    if (!t.defined() || t.device().type() != kDevice) return v;
    auto host = cpu_alias(t);
    aliases.push_back({t, host});
    return host;
  }
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList()) out.push_back(to_cpu(t, aliases).toTensor());
    return out;
  }
  if (v.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> out;
    for (const std::optional<at::Tensor>& t : v.toOptionalTensorList())
      out.push_back(t.has_value() ? std::optional<at::Tensor>(to_cpu(*t, aliases).toTensor()) : std::nullopt);
    return out;
  }
  if (v.isList()) {  // Tensor[][] (scatter, gather)
    auto list = v.toList();
    c10::impl::GenericList out(list.elementType());
    for (const c10::IValue& item : list) out.push_back(to_cpu(item, aliases));
    return out;
  }
  if (v.isDevice() && v.toDevice().type() == kDevice) return c10::Device(c10::kCPU);
  if (v.isGenerator() && v.toGenerator().device().type() == kDevice) return inner_generator(v.toGenerator());
  return v;
}

// After the CPU kernel: a device tensor whose CPU alias was resized (or given new memory) follows it.
void sync_back(const Alias& a) {
  auto* host_storage = a.host.storage().unsafeGetStorageImpl();
  auto* storage = a.device.storage().unsafeGetStorageImpl();
  // (Only new memory is adopted: the alias's own memory holds the device storage, which must not hold it back.)
  if (host_storage->data() != storage->data())
    storage->set_data_ptr_noswap(adopt_data(a.host.storage(), a.device.device().index()));
  if (host_storage->nbytes() != storage->nbytes()) storage->set_nbytes(host_storage->nbytes());
  if (a.device.sizes() != a.host.sizes() || a.device.strides() != a.host.strides() ||
      a.device.storage_offset() != a.host.storage_offset()) {
    a.device.unsafeGetTensorImpl()->set_sizes_and_strides(a.host.sizes(), a.host.strides(), a.host.storage_offset());
  }
}

at::Tensor from_cpu(const at::Tensor& t, const std::vector<Alias>& aliases, c10::DeviceIndex index) {
  if (!t.defined()) return t;
  for (const auto& a : aliases) {
    if (t.unsafeGetTensorImpl() == a.host.unsafeGetTensorImpl()) return a.device;  // in place: the argument
  }
  for (const auto& a : aliases) {
    if (t.storage().is_alias_of(a.host.storage())) return device_tensor(a.device.storage(), t);  // a view
  }
  if (t.device().type() != c10::kCPU) return t;
  return device_tensor(adopt(t.storage(), index), t);
}

c10::IValue wrap(const c10::IValue& v, const std::vector<Alias>& aliases, c10::DeviceIndex index) {
  if (v.isTensor()) return from_cpu(v.toTensor(), aliases, index);
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList()) out.push_back(from_cpu(t, aliases, index));
    return out;
  }
  if (v.isList()) {
    auto list = v.toList();
    c10::impl::GenericList out(list.elementType());
    for (const c10::IValue& item : list) out.push_back(wrap(item, aliases, index));
    return out;
  }
  return v;
}

void check_devices(const std::string& name, c10::ArrayRef<c10::IValue> args) {
  bool device = false, host = false;
  auto look = [&](const at::Tensor& t) {
    if (!t.defined()) return;
    device |= t.device().type() == kDevice;
    host |= t.device().type() == c10::kCPU && t.dim() > 0;
  };
  for (const auto& v : args) {
    if (v.isTensor()) look(v.toTensor());
    else if (v.isTensorList()) for (const at::Tensor& t : v.toTensorList()) look(t);
  }
  if (!device || !host || kCrossDevice.count(name.substr(0, name.find('.')))) return;
  {
    std::lock_guard<std::mutex> lock(stats_mutex);
    ops_mixed[name]++;
  }
  TORCH_CHECK(!strict_mode, "Expected all tensors to be on the same device, but found at least two devices, "
              "neuron:0 and cpu! (operator aten::", name.substr(0, name.find('.')),
              ": a tensor was not moved with .to(device); the emulated device runs in strict mode)");
}

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  auto name = op_name(op);
  count(name);
  const auto n = op.schema().arguments().size();
  auto args = torch::jit::last(*stack, n);
  check_devices(name, args);
  std::vector<Alias> aliases;
  c10::DeviceIndex index = current_device;
  for (const auto& v : args) {
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().device().type() == kDevice) {
      index = v.toTensor().device().index();
      break;
    }
    if (v.isDevice() && v.toDevice().type() == kDevice && v.toDevice().has_index()) index = v.toDevice().index();
  }
  for (size_t i = stack->size() - n; i < stack->size(); ++i) {
    auto& v = (*stack)[i];
    v = to_cpu(v, aliases);
  }
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  for (const auto& a : aliases) sync_back(a);
  const auto m = op.schema().returns().size();
  for (size_t i = stack->size() - m; i < stack->size(); ++i) (*stack)[i] = wrap((*stack)[i], aliases, index);
}

// -- kernels of their own ----------------------------------------------------------------------------------
at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout>, std::optional<at::Device> device, std::optional<bool>,
                               std::optional<at::MemoryFormat> memory_format) {
  count("empty.memory_format");
  c10::DeviceGuard guard(device.value_or(c10::Device(kDevice, current_device)));
  return at::detail::empty_generic(size, &device_allocator, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<at::ScalarType> dtype,
                         std::optional<at::Layout>, std::optional<at::Device> device, std::optional<bool>) {
  count("empty_strided");
  c10::DeviceGuard guard(device.value_or(c10::Device(kDevice, current_device)));
  return at::detail::empty_strided_generic(size, stride, &device_allocator,
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool) {
  count("_copy_from");
  auto source = self.device().type() == kDevice ? cpu_alias(self) : self;
  auto target = dst.device().type() == kDevice ? cpu_alias(dst) : dst;
  target.copy_(source);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  count("_copy_from_and_resize");
  dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

const at::Tensor& resize(const at::Tensor& self, c10::IntArrayRef size, std::optional<at::MemoryFormat> format) {
  count("resize_");
  at::native::resize_impl_cpu_(self.unsafeGetTensorImpl(), size, std::nullopt);
  if (format.has_value() && *format != at::MemoryFormat::Preserve)
    self.unsafeGetTensorImpl()->empty_tensor_restride(*format);
  return self;
}

at::Tensor& set_empty(at::Tensor& self) {
  count("set_");
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, &device_allocator, true);
  return at::native::set_storage_cpu_(self, storage, 0, {0}, {});
}

at::Tensor view(const at::Tensor& self, c10::IntArrayRef size) {
  count("view");
  return at::native::view(self, size);
}

at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                      std::optional<int64_t> offset) {
  count("as_strided");
  return at::native::as_strided_tensorimpl(self, size, stride, offset);
}

at::Scalar local_scalar(const at::Tensor& self) {
  count("_local_scalar_dense");
  return at::_local_scalar_dense(cpu_alias(self));
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("resize_", resize);
  m.impl("set_", set_empty);
  m.impl("set_.source_Storage", at::native::set_);
  m.impl("set_.source_Storage_storage_offset", at::native::set_storage_cpu_);
  m.impl("view", view);
  m.impl("as_strided", as_strided);
  m.impl("_local_scalar_dense", local_scalar);
}

// -- device guard ------------------------------------------------------------------------------------------
struct Guard final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kDevice; }
  c10::Device exchangeDevice(c10::Device d) const override {
    auto old = getDevice();
    setDevice(d);
    return old;
  }
  c10::Device getDevice() const override { return c10::Device(kDevice, current_device); }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.index() >= 0 && d.index() < device_count, "invalid neuron device index ", int(d.index()), ": ",
                int(device_count), " device(s) visible");
    current_device = d.index();
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override { current_device = d.index(); }
  c10::Stream getStream(c10::Device d) const override { return c10::Stream(c10::Stream::DEFAULT, d); }
  c10::Stream getNewStream(c10::Device d, int) const override { return c10::Stream(c10::Stream::DEFAULT, d); }
  c10::Stream exchangeStream(c10::Stream s) const override { return s; }
  c10::DeviceIndex deviceCount() const noexcept override { return device_count; }
  // Every operator has run when it returns: events are complete at once.
  void record(void** event, const c10::Stream&, const c10::DeviceIndex, const c10::EventFlag) const override {
    if (!*event) *event = reinterpret_cast<void*>(1);
  }
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeEvent(void*) const override {}
  void synchronizeDevice(const c10::DeviceIndex) const override {}
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
};
C10_REGISTER_GUARD_IMPL(PrivateUse1, Guard);

// -- generators: a device generator draws from a CPU generator of its own ----------------------------------
struct GeneratorImpl final : c10::GeneratorImpl {
  at::Generator cpu;
  GeneratorImpl(c10::DeviceIndex index, at::Generator inner)
      : c10::GeneratorImpl(c10::Device(kDevice, index), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
        cpu(std::move(inner)) {}
  void set_current_seed(uint64_t seed) override { cpu.set_current_seed(seed); }
  void set_offset(uint64_t offset) override { cpu.set_offset(offset); }
  uint64_t get_offset() const override { return cpu.get_offset(); }
  uint64_t current_seed() const override { return cpu.current_seed(); }
  uint64_t seed() override { return cpu.seed(); }
  void set_state(const c10::TensorImpl& state) override { cpu.unsafeGetGeneratorImpl()->set_state(state); }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override { return cpu.unsafeGetGeneratorImpl()->get_state(); }
  GeneratorImpl* clone_impl() const override { return new GeneratorImpl(device().index(), cpu.clone()); }
};

at::Generator inner_generator(const at::Generator& g) {
  return static_cast<GeneratorImpl*>(g.unsafeGetGeneratorImpl())->cpu;
}

at::Generator new_generator(c10::DeviceIndex index) {
  return at::make_generator<GeneratorImpl>(index < 0 ? current_device : index, at::detail::createCPUGenerator());
}

// The default generators share the CPU's, as the kernels without a generator argument draw from it.
const at::Generator& default_generator(c10::DeviceIndex index) {
  static std::mutex mutex;
  static std::map<c10::DeviceIndex, at::Generator> generators;
  std::lock_guard<std::mutex> lock(mutex);
  auto i = index < 0 ? current_device : index;
  auto it = generators.find(i);
  if (it == generators.end())
    it = generators.emplace(i, at::make_generator<GeneratorImpl>(i, at::detail::getDefaultCPUGenerator())).first;
  return it->second;
}

// -- hooks -------------------------------------------------------------------------------------------------
struct Hooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override { return default_generator(index); }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override { return new_generator(index); }
  at::Device getDeviceFromPtr(void*) const override { return c10::Device(kDevice, current_device); }
  bool isPinnedPtr(const void* data) const override {
    std::lock_guard<std::mutex> lock(pinned_mutex);
    return pinned_ptrs.count(data) > 0;
  }
  c10::Allocator* getPinnedMemoryAllocator() const override { return &pinned_allocator; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return device_count; }
  c10::DeviceIndex getCurrentDevice() const override { return current_device; }
  void setCurrentDevice(c10::DeviceIndex d) const override { current_device = d; }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override {
    auto old = current_device;
    current_device = d;
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override { return exchangeDevice(d); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t nbytes) const override {
    at::native::resize_bytes_cpu(storage.unsafeGetStorageImpl(), nbytes);
  }
};

struct Register {
  Register() {
    static Hooks hooks;
    at::RegisterPrivateUse1HooksInterface(&hooks);
    c10::SetAllocator(kDevice, &device_allocator);
  }
} register_once;

// -- the control surface: neuron_emulator::* -----------------------------------------------------------
std::map<std::string, int64_t>& counter(int64_t which) {
  return which == 0 ? ops_seen : which == 1 ? ops_mixed : ops_tracked;
}

std::tuple<std::vector<std::string>, std::vector<int64_t>> stats(int64_t which) {
  std::lock_guard<std::mutex> lock(stats_mutex);
  std::vector<std::string> names;
  std::vector<int64_t> counts;
  for (const auto& [name, n] : counter(which)) {
    names.push_back(name);
    counts.push_back(n);
  }
  return {names, counts};
}

void clear(int64_t which) {
  std::lock_guard<std::mutex> lock(stats_mutex);
  counter(which).clear();
}

void configure(bool strict, int64_t devices) {
  strict_mode = strict;
  device_count = static_cast<c10::DeviceIndex>(devices);
}

void set_device(int64_t index) { Guard().setDevice(c10::Device(kDevice, static_cast<c10::DeviceIndex>(index))); }

int64_t get_device() { return current_device; }

// Operators of other libraries with a PrivateUse1 kernel of their own (the c10d collectives, which would ask the
// process group for a device backend) run through the CPU fallback instead.
struct Silent final : c10::WarningHandler {
  void process(const c10::Warning&) override {}  // "overriding a previously registered kernel": that is the point
};

void route_to_cpu(const std::string& ns, const std::vector<std::string>& names) {
  Silent silent;
  c10::WarningUtils::WarningHandlerGuard guard(&silent);
  static std::vector<std::unique_ptr<torch::Library>> kept;
  kept.push_back(std::make_unique<torch::Library>(torch::Library::IMPL, ns, c10::DispatchKey::PrivateUse1,
                                                  __FILE__, __LINE__));
  for (const auto& name : names) kept.back()->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}

TORCH_LIBRARY(neuron_emulator, m) {
  m.def("stats(int which) -> (str[], int[])", stats);
  m.def("clear(int which) -> ()", clear);
  m.def("configure(bool strict, int devices) -> ()", configure);
  m.def("set_device(int index) -> ()", set_device);
  m.def("get_device() -> int", get_device);
  m.def("route_to_cpu(str ns, str[] names) -> ()", route_to_cpu);
}

}  // namespace
