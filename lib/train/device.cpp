// resolve_device(): through c10's device guard of the type, so it serves CUDA and
// any other backend the same way and needs no CUDA header.
#include "train/device.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

#include "util/error.h"

namespace kiln::train {

c10::Device resolve_device(const std::string& name) {
  c10::Device device = c10::kCPU;
  try {
    device = c10::Device(name);
  } catch (const c10::Error&) {
    throw InputError(c10::str("train.device: expected cpu, cuda or cuda:N, found \"", name, "\""));
  }
  if (device.is_cpu()) return c10::Device(c10::kCPU);
  const auto type = device.type();
  const int count = c10::impl::hasDeviceGuardImpl(type)
                        ? c10::impl::getDeviceGuardImpl(type)->deviceCount()
                        : 0;
  if (count == 0)
    throw InputError(c10::str("train.device: expected cpu (no ", type, " device is visible), found \"",
                              name, "\""));
  if (!device.has_index()) return c10::impl::getDeviceGuardImpl(type)->getDevice();
  if (device.index() >= count)
    throw InputError(c10::str("train.device: expected ", type, ":0", count > 1 ? c10::str(" … ", type, ":", count - 1) : "",
                              " (", count, " visible), found \"", name, "\""));
  return device;
}

}  // namespace kiln::train
