// A recording stand-in for TensorRT's libnvinfer.so.N, so that customops can learn which plugin creators a
// plugin library registers without TensorRT and without a GPU (customops/probe/tensorrt_standin.py compiles it
// with -DCUSTOMOPS_MAJOR=N and names it libnvinfer.so.N).
//
// The declarations below are customops' own, written from the virtual method order of TensorRT's public
// headers (NvInferRuntime.h, NvInferRuntimeBase.h, NvInferRuntimePlugin.h, NvInferPluginBase.h) of each
// major: the plugin library calls into the registry and the logger through their vtables, and the registry
// reads each creator through the creator's own vtable, so the order of the virtual functions is the ABI. A
// layout that does not match fails silently (nothing is recorded), which is why the major is the one the
// plugin library itself needs. Within a major TensorRT only appends to these interfaces.
//
// The majors this file has a layout for are the values tested as `CUSTOMOPS_MAJOR == N` (customops reads
// them from this text).

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>

#define EXPORT extern "C" __attribute__((visibility("default")))

namespace customops_standin {

using Text = char const*;
struct InterfaceInfo {  // TensorRT 10+: what IVersionedInterface::getInterfaceInfo returns
    Text kind;
    int32_t major;
    int32_t minor;
};

#if CUSTOMOPS_MAJOR == 8
class CreatorV1 {  // IPluginCreator of TensorRT 8
public:
    virtual int32_t getTensorRTVersion() const noexcept = 0;
    virtual Text getPluginName() const noexcept = 0;
    virtual Text getPluginVersion() const noexcept = 0;
    virtual void const* getFieldNames() noexcept = 0;
    virtual void* createPlugin(Text name, void const* fields) noexcept = 0;
    virtual void* deserializePlugin(Text name, void const* data, size_t length) noexcept = 0;
    virtual void setPluginNamespace(Text ns) noexcept = 0;
    virtual Text getPluginNamespace() const noexcept = 0;
};
#elif CUSTOMOPS_MAJOR == 10 || CUSTOMOPS_MAJOR == 11
class Versioned {  // IVersionedInterface, the base of every creator (and, from 11, of the logger)
public:
    virtual int32_t getAPILanguage() const noexcept { return 0; }
    virtual InterfaceInfo getInterfaceInfo() const noexcept = 0;
    virtual ~Versioned() noexcept = default;
};

class CreatorV1 : public Versioned {  // IPluginCreator ("PLUGIN CREATOR_V1")
public:
    virtual Text getPluginName() const noexcept = 0;
    virtual Text getPluginVersion() const noexcept = 0;
    virtual void const* getFieldNames() noexcept = 0;
    virtual void* createPlugin(Text name, void const* fields) noexcept = 0;
    virtual void* deserializePlugin(Text name, void const* data, size_t length) noexcept = 0;
    virtual void setPluginNamespace(Text ns) noexcept = 0;
    virtual Text getPluginNamespace() const noexcept = 0;
};

class CreatorV3 : public Versioned {  // IPluginCreatorV3One and IPluginCreatorV3Quick ("PLUGIN CREATOR_V3...")
public:
    virtual void* createPlugin(Text name, void const* fields, int32_t phase) noexcept = 0;
    virtual void const* getFieldNames() noexcept = 0;
    virtual Text getPluginName() const noexcept = 0;
    virtual Text getPluginVersion() const noexcept = 0;
    virtual Text getPluginNamespace() const noexcept = 0;
};
#else
#error "no layout for this TensorRT major"
#endif

// -- what was registered ------------------------------------------------------------------------------------
// The registry's rules, as TensorRT's own registry (libnvinfer_dispatch/libnvinfer_lean 10 and 11) keeps them
// (tests/test_probe_tensorrt_real.py compares): registerCreator(creator, ns) files the creator under
// (name, version, ns), replacing what was filed there, unless something is already filed under
// (name, version, the creator's own namespace), which refuses it; getCreator(name, version, ns) finds what is
// filed under (name, version, ns) only when that creator's own namespace is ns. REGISTER_TENSORRT_PLUGIN passes
// ns "", so a creator with a namespace of its own is filed where no lookup finds it.
constexpr int kRecords = 4096;
constexpr size_t kText = 256;

struct Record {
    void const* creator;
    char ns[kText], name[kText], version[kText], kind[kText], given[kText];  // ns: the creator's own
    bool accepted;   // false: refused (other: the record filed under its identity), or read from an entry point
    bool found;      // accepted, and getCreator found it under its own namespace right after
    bool entry;      // returned by getCreators/getPluginCreators, which a dlopen() never calls: not registered
    int32_t other;   // refused: the record that refused it; accepted: the record it replaced; else -1
};

Record records[kRecords];
int count = 0;
int32_t filed[kRecords];  // the registry's table: record indexes, keyed by (name, version, given) of each
int nfiled = 0;

void copy(char* to, Text from) {
    if (from == nullptr) from = "";
    size_t n = strnlen(from, kText - 1);
    memcpy(to, from, n);
    to[n] = '\0';
}

int slot(char const* name, char const* version, char const* ns) {  // where (name, version, ns) is filed, or -1
    for (int i = 0; i < nfiled; ++i) {
        Record const& r = records[filed[i]];
        if (strcmp(r.name, name) == 0 && strcmp(r.version, version) == 0 && strcmp(r.given, ns) == 0) return i;
    }
    return -1;
}

// Accept record i: filed under the namespace it was registered in, in place of what was there (other: that).
void place(int i) {
    Record& r = records[i];
    int replaced = slot(r.name, r.version, r.given);
    r.other = replaced >= 0 ? filed[replaced] : -1;
    if (replaced >= 0) filed[replaced] = i;
    else filed[nfiled++] = i;
    r.accepted = true;
}

// File record i as the registry does: refused when something is filed under its identity (other: that).
void file(int i) {
    int held = slot(records[i].name, records[i].version, records[i].ns);
    if (held >= 0) records[i].other = filed[held];
    else place(i);
}

// Take record i out of the table again, putting back what it replaced.
void unfile(int i) {
    for (int k = 0; k < nfiled; ++k) {
        if (filed[k] != i) continue;
        if (records[i].other >= 0) filed[k] = records[i].other;
        else filed[k] = filed[--nfiled];
        break;
    }
    records[i].accepted = false;
    records[i].other = -1;
}

// Record one attempt (or one creator an entry point returned): its index (-1 when there is no room left).
int record(void const* creator, Text kind, Text name, Text version, Text ownNamespace, Text givenNamespace,
           bool entry) {
    if (count == kRecords) return -1;
    Record& r = records[count];
    r.creator = creator;
    copy(r.kind, kind);
    copy(r.name, name);
    copy(r.version, version);
    copy(r.ns, ownNamespace);
    copy(r.given, givenNamespace);
    r.accepted = false;
    r.entry = entry;
    r.other = -1;
    bool nameless = r.name[0] == '\0' && r.version[0] == '\0';  // a kind without a known layout: not filed
    if (nameless && !entry) r.accepted = true;
    else if (!entry) file(count);
    r.found = r.accepted && (nameless || strcmp(r.ns, r.given) == 0);
    return count++;
}

bool answer(int i) { return i >= 0 && records[i].accepted; }

// TensorRT's own answer to record i's registration, and whether its getCreator finds the creator right after;
// the table follows the answer (refused: by what TensorRT's registry holds, which customops may not know).
bool settle(int i, bool taken, void const* lookedUp) {
    if (i < 0) return taken;
    Record& r = records[i];
    if (r.accepted && !taken) {
        unfile(i);
    } else if (!r.accepted && taken) {
        place(i);
    }
    r.found = taken && lookedUp == r.creator;
    return taken;
}

void const* find(Text name, Text version, Text ns) {
    if (name == nullptr || version == nullptr) return nullptr;
    if (ns == nullptr) ns = "";
    int i = slot(name, version, ns);
    return i >= 0 && strcmp(records[filed[i]].ns, ns) == 0 ? records[filed[i]].creator : nullptr;
}

void const* accepted[kRecords];

void const* const* list(int32_t* n) {
    int32_t k = 0;
    for (int i = 0; i < count; ++i)
        if (records[i].accepted) accepted[k++] = records[i].creator;
    if (n) *n = k;
    return accepted;
}

#if CUSTOMOPS_MAJOR == 8
int registerV1(CreatorV1& c, Text ns, bool entry = false) {
    return record(&c, "PLUGIN CREATOR_V1", c.getPluginName(), c.getPluginVersion(), c.getPluginNamespace(), ns,
                  entry);
}
#else
// A creator keeps its identity in slots that depend on its kind: dispatch on getInterfaceInfo().kind.
int registerAny(Versioned& c, Text ns, bool entry = false) {
    InterfaceInfo info = c.getInterfaceInfo();
    Text kind = info.kind ? info.kind : "";
    if (strcmp(kind, "PLUGIN CREATOR_V1") == 0) {
        auto& v1 = static_cast<CreatorV1&>(c);
        return record(&c, kind, v1.getPluginName(), v1.getPluginVersion(), v1.getPluginNamespace(), ns, entry);
    }
    if (strncmp(kind, "PLUGIN CREATOR_V3", 17) == 0) {
        auto& v3 = static_cast<CreatorV3&>(c);
        return record(&c, kind, v3.getPluginName(), v3.getPluginVersion(), v3.getPluginNamespace(), ns, entry);
    }
    return record(&c, kind, "", "", "", ns, entry);  // a kind without a known layout: recorded, nameless
}
#endif

// -- the registry, in IPluginRegistry's virtual method order ------------------------------------------------
// With TensorRT's own registry handed over (customops_standin_forward: a container's real libnvinfer), each
// registration is still recorded, and TensorRT's registry answers it and every lookup.
class Registry;
Registry* real = nullptr;

#define LOOKUP(i, call) (i >= 0 ? real->call(records[i].name, records[i].version, records[i].ns) : nullptr)
#define REGISTER(recorded, lookup)                                                                             \
    int i = recorded;                                                                                          \
    if (real == nullptr) return answer(i);                                                                     \
    bool taken = real->registerCreator(c, ns);                                                                 \
    return settle(i, taken, LOOKUP(i, lookup))
#define FORWARDED(call, otherwise) return real != nullptr ? real->call : otherwise

#if CUSTOMOPS_MAJOR == 8
class Registry {
public:
    virtual bool registerCreator(CreatorV1& c, Text ns) noexcept { REGISTER(registerV1(c, ns), getPluginCreator); }
    virtual void const* const* getPluginCreatorList(int32_t* n) const noexcept {
        FORWARDED(getPluginCreatorList(n), list(n)); }
    virtual void const* getPluginCreator(Text name, Text version, Text ns) noexcept {
        FORWARDED(getPluginCreator(name, version, ns), find(name, version, ns)); }
    virtual ~Registry() noexcept = default;
    virtual void setErrorRecorder(void*) noexcept {}
    virtual void* getErrorRecorder() const noexcept { return nullptr; }
    virtual bool deregisterCreator(CreatorV1 const&) noexcept { return false; }
    virtual bool isParentSearchEnabled() const { return true; }
    virtual void setParentSearchEnabled(bool) {}
    virtual void* loadLibrary(Text) noexcept { return nullptr; }
    virtual void deregisterLibrary(void*) noexcept {}
};
#elif CUSTOMOPS_MAJOR == 10
class Registry {
public:
    virtual bool registerCreator(CreatorV1& c, Text ns) noexcept { REGISTER(registerAny(c, ns), getCreator); }
    virtual void const* const* getPluginCreatorList(int32_t* n) const noexcept {
        FORWARDED(getPluginCreatorList(n), list(n)); }
    virtual void const* getPluginCreator(Text name, Text version, Text ns) noexcept {
        FORWARDED(getPluginCreator(name, version, ns), find(name, version, ns)); }
    virtual ~Registry() noexcept = default;
    virtual void setErrorRecorder(void*) noexcept {}
    virtual void* getErrorRecorder() const noexcept { return nullptr; }
    virtual bool deregisterCreator(CreatorV1 const&) noexcept { return false; }
    virtual bool isParentSearchEnabled() const { return true; }
    virtual void setParentSearchEnabled(bool) {}
    virtual void* loadLibrary(Text) noexcept { return nullptr; }
    virtual void deregisterLibrary(void*) noexcept {}
    virtual bool registerCreator(Versioned& c, Text ns) noexcept { REGISTER(registerAny(c, ns), getCreator); }
    virtual void const* const* getAllCreators(int32_t* n) const noexcept { FORWARDED(getAllCreators(n), list(n)); }
    virtual void const* getCreator(Text name, Text version, Text ns) noexcept {
        FORWARDED(getCreator(name, version, ns), find(name, version, ns)); }
    virtual bool deregisterCreator(Versioned const&) noexcept { return false; }
    virtual void* acquirePluginResource(Text, void* resource) noexcept { return resource; }
    virtual int32_t releasePluginResource(Text) noexcept { return 0; }
    virtual void const* const* getAllCreatorsRecursive(int32_t* n) noexcept {
        FORWARDED(getAllCreatorsRecursive(n), list(n)); }
};
#else  // 11: the IPluginCreator methods are gone, the destructor comes first
class Registry {
public:
    virtual ~Registry() noexcept = default;
    virtual void setErrorRecorder(void*) noexcept {}
    virtual void* getErrorRecorder() const noexcept { return nullptr; }
    virtual bool isParentSearchEnabled() const { return true; }
    virtual void setParentSearchEnabled(bool) {}
    virtual void* loadLibrary(Text) noexcept { return nullptr; }
    virtual void deregisterLibrary(void*) noexcept {}
    virtual bool registerCreator(Versioned& c, Text ns) noexcept { REGISTER(registerAny(c, ns), getCreator); }
    virtual void const* const* getAllCreators(int32_t* n) const noexcept { FORWARDED(getAllCreators(n), list(n)); }
    virtual void const* getCreator(Text name, Text version, Text ns) noexcept {
        FORWARDED(getCreator(name, version, ns), find(name, version, ns)); }
    virtual bool deregisterCreator(Versioned const&) noexcept { return false; }
    virtual void* acquirePluginResource(Text, void* resource) noexcept { return resource; }
    virtual int32_t releasePluginResource(Text) noexcept { return 0; }
    virtual void const* const* getAllCreatorsRecursive(int32_t* n) noexcept {
        FORWARDED(getAllCreatorsRecursive(n), list(n)); }
};
#endif

// -- the logger and the logger finder (ILogger, ILoggerFinder) -----------------------------------------------
void say(int32_t severity, Text message) {
    fprintf(stderr, "[TensorRT stand-in log %d] %s\n", severity, message ? message : "");
}

#if CUSTOMOPS_MAJOR == 11
class Logger : public Versioned {
public:
    InterfaceInfo getInterfaceInfo() const noexcept override { return {"ILogger", 1, 0}; }
    virtual void log(int32_t severity, Text message) noexcept { say(severity, message); }
};

class LoggerFinder : public Versioned {
public:
    InterfaceInfo getInterfaceInfo() const noexcept override { return {"ILoggerFinder", 1, 0}; }
    virtual Logger* findLogger();
};
#else
class Logger {
public:
    virtual void log(int32_t severity, Text message) noexcept { say(severity, message); }
    virtual ~Logger() = default;
};

class LoggerFinder {
public:
    virtual Logger* findLogger();
    virtual ~LoggerFinder() = default;
};
#endif

Registry registry;
Logger logger;
LoggerFinder finder;

Logger* LoggerFinder::findLogger() { return &logger; }

}  // namespace customops_standin

using namespace customops_standin;

// -- libnvinfer's entry points ---------------------------------------------------------------------------------
EXPORT Registry* getPluginRegistry() noexcept { return &registry; }
EXPORT Logger* getLogger() noexcept { return &logger; }

// -- what customops' probe script reads, and how it hands over the creators of getCreators/getPluginCreators --
EXPORT int32_t customops_standin_major() { return CUSTOMOPS_MAJOR; }
EXPORT int32_t customops_standin_count() { return count; }
EXPORT int32_t customops_standin_full() { return count == kRecords; }
EXPORT int32_t customops_standin_accepted(int32_t i) { return i >= 0 && i < count && records[i].accepted; }
EXPORT int32_t customops_standin_entry(int32_t i) { return i >= 0 && i < count && records[i].entry; }
EXPORT int32_t customops_standin_found(int32_t i) { return i >= 0 && i < count && records[i].found; }

// Hand over TensorRT's own registry (what a real libnvinfer's getPluginRegistry() returned): it answers from now.
// How many creators it holds already (a call through its vtable: one of another layout may crash here).
EXPORT int32_t customops_standin_forward(void* registry) {
    real = static_cast<Registry*>(registry);
    int32_t n = 0;
#if CUSTOMOPS_MAJOR == 8
    real->getPluginCreatorList(&n);
#else
    real->getAllCreators(&n);
#endif
    return n;
}
EXPORT int32_t customops_standin_other(int32_t i) { return i >= 0 && i < count ? records[i].other : -1; }

// 0 the creator's own namespace, 1 name, 2 version, 3 kind, 4 the namespace it was registered in
EXPORT Text customops_standin_field(int32_t i, int32_t field) {
    if (i < 0 || i >= count) return "";
    Record const& r = records[i];
    return field == 0 ? r.ns : field == 1 ? r.name : field == 2 ? r.version : field == 3 ? r.kind : r.given;
}

EXPORT void* customops_standin_logger_finder() { return &finder; }

// What getCreators/getPluginCreators returned: read, not registered (only IPluginRegistry::loadLibrary calls them,
// registering each creator in its own namespace; a dlopen(), as Triton loads plugins=, does not).
EXPORT void customops_standin_entry_points(void* const* creators, int32_t n) {
    for (int32_t i = 0; creators != nullptr && i < n; ++i) {
        if (creators[i] == nullptr) continue;
#if CUSTOMOPS_MAJOR == 8
        registerV1(*static_cast<CreatorV1*>(creators[i]), "", true);
#else
        registerAny(*static_cast<Versioned*>(creators[i]), "", true);
#endif
    }
}
