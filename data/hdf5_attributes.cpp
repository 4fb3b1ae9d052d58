// Scalar attributes (declared in hdf5_handle.h). Strings are written fixed-length, NUL-terminated,
// UTF-8; reads also accept the variable-length strings h5py writes. Writing an attribute that
// exists replaces it.
#include <vector>

#include "data/hdf5_handle.h"
#include "model/core/error.h"

namespace strata {
namespace {

std::string describe_attribute(hid_t object, const std::string& name) {
  return "attribute '" + name + "' of " + describe_id(object);
}

void write_scalar_attribute(hid_t object, const std::string& name, hid_t file_type,
                            hid_t memory_type, const void* value) {
  quiet_hdf5_errors();
  if (has_attribute(object, name) && H5Adelete(object, name.c_str()) < 0) {
    fail("cannot replace ", describe_attribute(object, name), ": ", hdf5_error_reason());
  }
  const H5Id space(H5Screate(H5S_SCALAR), H5Sclose);
  const H5Id attribute(
      H5Acreate2(object, name.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!attribute.valid() || H5Awrite(attribute.get(), memory_type, value) < 0) {
    fail("cannot write ", describe_attribute(object, name), ": ", hdf5_error_reason());
  }
}

H5Id open_attribute(hid_t object, const std::string& name) {
  quiet_hdf5_errors();
  if (!has_attribute(object, name)) fail("missing ", describe_attribute(object, name));
  H5Id attribute(H5Aopen(object, name.c_str(), H5P_DEFAULT), H5Aclose);
  if (!attribute.valid()) {
    fail("cannot open ", describe_attribute(object, name), ": ", hdf5_error_reason());
  }
  // The readers below read exactly one element.
  const H5Id space(H5Aget_space(attribute.get()), H5Sclose);
  if (H5Sget_simple_extent_npoints(space.get()) != 1) {
    fail(describe_attribute(object, name), " is not a scalar");
  }
  return attribute;
}

H5T_class_t attribute_class(hid_t attribute) {
  const H5Id type(H5Aget_type(attribute), H5Tclose);
  return H5Tget_class(type.get());
}

}  // namespace

bool has_attribute(hid_t object, const std::string& name) {
  quiet_hdf5_errors();
  const htri_t exists = H5Aexists(object, name.c_str());
  if (exists < 0) {
    fail("cannot look up ", describe_attribute(object, name), ": ", hdf5_error_reason());
  }
  return exists > 0;
}

void write_attribute_string(hid_t object, const std::string& name, const std::string& value) {
  const H5Id type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), value.size() + 1);
  H5Tset_strpad(type.get(), H5T_STR_NULLTERM);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  write_scalar_attribute(object, name, type.get(), type.get(), value.c_str());
}

void write_attribute_i64(hid_t object, const std::string& name, std::int64_t value) {
  write_scalar_attribute(object, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}

void write_attribute_f64(hid_t object, const std::string& name, double value) {
  write_scalar_attribute(object, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
}

std::string read_attribute_string(hid_t object, const std::string& name) {
  const H5Id attribute = open_attribute(object, name);
  const H5Id type(H5Aget_type(attribute.get()), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_STRING) {
    fail(describe_attribute(object, name), " is not a string");
  }
  if (H5Tis_variable_str(type.get()) > 0) {
    char* value = nullptr;
    if (H5Aread(attribute.get(), type.get(), &value) < 0) {
      fail("cannot read ", describe_attribute(object, name), ": ", hdf5_error_reason());
    }
    std::string result = value != nullptr ? value : "";
    H5free_memory(value);
    return result;
  }
  std::vector<char> buffer(H5Tget_size(type.get()) + 1, '\0');
  if (H5Aread(attribute.get(), type.get(), buffer.data()) < 0) {
    fail("cannot read ", describe_attribute(object, name), ": ", hdf5_error_reason());
  }
  return std::string(buffer.data());  // stops at the NUL terminator or padding
}

std::int64_t read_attribute_i64(hid_t object, const std::string& name) {
  const H5Id attribute = open_attribute(object, name);
  if (attribute_class(attribute.get()) != H5T_INTEGER) {
    fail(describe_attribute(object, name), " is not an integer");
  }
  std::int64_t value = 0;
  if (H5Aread(attribute.get(), H5T_NATIVE_INT64, &value) < 0) {
    fail("cannot read ", describe_attribute(object, name), ": ", hdf5_error_reason());
  }
  return value;
}

double read_attribute_f64(hid_t object, const std::string& name) {
  const H5Id attribute = open_attribute(object, name);
  const H5T_class_t type_class = attribute_class(attribute.get());
  if (type_class != H5T_FLOAT && type_class != H5T_INTEGER) {
    fail(describe_attribute(object, name), " is not a number");
  }
  double value = 0;
  if (H5Aread(attribute.get(), H5T_NATIVE_DOUBLE, &value) < 0) {
    fail("cannot read ", describe_attribute(object, name), ": ", hdf5_error_reason());
  }
  return value;
}

}  // namespace strata
