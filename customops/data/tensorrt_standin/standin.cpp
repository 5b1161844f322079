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
constexpr int kRecords = 4096;
constexpr size_t kText = 256;

struct Record {
    void const* creator;
    char ns[kText], name[kText], version[kText], kind[kText];
    bool accepted;  // false: refused, the same (namespace, name, version) was registered before
};

Record records[kRecords];
int count = 0;

void copy(char* to, Text from) {
    if (from == nullptr) from = "";
    size_t n = strnlen(from, kText - 1);
    memcpy(to, from, n);
    to[n] = '\0';
}

bool same(Record const& a, Record const& b) {
    return strcmp(a.ns, b.ns) == 0 && strcmp(a.name, b.name) == 0 && strcmp(a.version, b.version) == 0;
}

// Record one attempt; the registry's answer: refused when an accepted record has the same identity.
bool record(void const* creator, Text kind, Text name, Text version, Text ownNamespace, Text givenNamespace) {
    if (count == kRecords) return false;
    Record& r = records[count];
    r.creator = creator;
    copy(r.kind, kind);
    copy(r.name, name);
    copy(r.version, version);
    copy(r.ns, givenNamespace != nullptr && givenNamespace[0] != '\0' ? givenNamespace : ownNamespace);
    r.accepted = true;
    for (int i = 0; i < count; ++i) {
        if (records[i].accepted && same(records[i], r)) r.accepted = false;
    }
    ++count;
    return r.accepted;
}

void const* find(Text name, Text version, Text ns) {
    for (int i = 0; i < count; ++i) {
        Record const& r = records[i];
        if (r.accepted && name && version && strcmp(r.name, name) == 0 && strcmp(r.version, version) == 0
            && strcmp(r.ns, ns ? ns : "") == 0)
            return r.creator;
    }
    return nullptr;
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
bool registerV1(CreatorV1& c, Text ns) {
    return record(&c, "PLUGIN CREATOR_V1", c.getPluginName(), c.getPluginVersion(), c.getPluginNamespace(), ns);
}
#else
// A creator keeps its identity in slots that depend on its kind: dispatch on getInterfaceInfo().kind.
bool registerAny(Versioned& c, Text ns) {
    InterfaceInfo info = c.getInterfaceInfo();
    Text kind = info.kind ? info.kind : "";
    if (strcmp(kind, "PLUGIN CREATOR_V1") == 0) {
        auto& v1 = static_cast<CreatorV1&>(c);
        return record(&c, kind, v1.getPluginName(), v1.getPluginVersion(), v1.getPluginNamespace(), ns);
    }
    if (strncmp(kind, "PLUGIN CREATOR_V3", 17) == 0) {
        auto& v3 = static_cast<CreatorV3&>(c);
        return record(&c, kind, v3.getPluginName(), v3.getPluginVersion(), v3.getPluginNamespace(), ns);
    }
    return record(&c, kind, "", "", "", ns);  // a kind without a known layout: recorded, nameless
}
#endif

// -- the registry, in IPluginRegistry's virtual method order ------------------------------------------------
#if CUSTOMOPS_MAJOR == 8
class Registry {
public:
    virtual bool registerCreator(CreatorV1& c, Text ns) noexcept { return registerV1(c, ns); }
    virtual void const* const* getPluginCreatorList(int32_t* n) const noexcept { return list(n); }
    virtual void const* getPluginCreator(Text name, Text version, Text ns) noexcept { return find(name, version, ns); }
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
    virtual bool registerCreator(CreatorV1& c, Text ns) noexcept { return registerAny(c, ns); }
    virtual void const* const* getPluginCreatorList(int32_t* n) const noexcept { return list(n); }
    virtual void const* getPluginCreator(Text name, Text version, Text ns) noexcept { return find(name, version, ns); }
    virtual ~Registry() noexcept = default;
    virtual void setErrorRecorder(void*) noexcept {}
    virtual void* getErrorRecorder() const noexcept { return nullptr; }
    virtual bool deregisterCreator(CreatorV1 const&) noexcept { return false; }
    virtual bool isParentSearchEnabled() const { return true; }
    virtual void setParentSearchEnabled(bool) {}
    virtual void* loadLibrary(Text) noexcept { return nullptr; }
    virtual void deregisterLibrary(void*) noexcept {}
    virtual bool registerCreator(Versioned& c, Text ns) noexcept { return registerAny(c, ns); }
    virtual void const* const* getAllCreators(int32_t* n) const noexcept { return list(n); }
    virtual void const* getCreator(Text name, Text version, Text ns) noexcept { return find(name, version, ns); }
    virtual bool deregisterCreator(Versioned const&) noexcept { return false; }
    virtual void* acquirePluginResource(Text, void* resource) noexcept { return resource; }
    virtual int32_t releasePluginResource(Text) noexcept { return 0; }
    virtual void const* const* getAllCreatorsRecursive(int32_t* n) noexcept { return list(n); }
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
    virtual bool registerCreator(Versioned& c, Text ns) noexcept { return registerAny(c, ns); }
    virtual void const* const* getAllCreators(int32_t* n) const noexcept { return list(n); }
    virtual void const* getCreator(Text name, Text version, Text ns) noexcept { return find(name, version, ns); }
    virtual bool deregisterCreator(Versioned const&) noexcept { return false; }
    virtual void* acquirePluginResource(Text, void* resource) noexcept { return resource; }
    virtual int32_t releasePluginResource(Text) noexcept { return 0; }
    virtual void const* const* getAllCreatorsRecursive(int32_t* n) noexcept { return list(n); }
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
EXPORT int32_t customops_standin_accepted(int32_t i) { return i >= 0 && i < count && records[i].accepted; }

EXPORT Text customops_standin_field(int32_t i, int32_t field) {  // 0 namespace, 1 name, 2 version, 3 kind
    if (i < 0 || i >= count) return "";
    Record const& r = records[i];
    return field == 0 ? r.ns : field == 1 ? r.name : field == 2 ? r.version : r.kind;
}

EXPORT void* customops_standin_logger_finder() { return &finder; }

// As the registry's loadLibrary does with what getCreators/getPluginCreators returned: register each one.
EXPORT void customops_standin_register(void* const* creators, int32_t n) {
    for (int32_t i = 0; creators != nullptr && i < n; ++i) {
        if (creators[i] == nullptr) continue;
#if CUSTOMOPS_MAJOR == 8
        registerV1(*static_cast<CreatorV1*>(creators[i]), "");
#else
        registerAny(*static_cast<Versioned*>(creators[i]), "");
#endif
    }
}
